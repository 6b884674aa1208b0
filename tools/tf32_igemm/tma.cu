// ---- Hopper (sm_90) staging: TMA copies on mbarriers, results stored by TMA from swizzled shared memory ----------
// Used by the transposed kernels and logsumexp's (assemble.py: TMA_USERS). A stage is one chunk of 8 input channels
// (or one slab of it) of one tile: its weights arrive as one bulk copy (packed per call in shared-memory order) and
// its input window as one 5-D tensor copy, [channel 8][d XBD][h XBH][w XBW], zero-filled where it leaves the input.
// A is then read with plain LDS: lanes (gid, tig) read voxel gid of channel tig, so a channel plane of XPLANE = 8 or
// 24 (mod 32) words keeps the 32 lanes on 32 banks.

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

// The producer's arrival, announcing the bytes its copies will deliver to this barrier.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile("{\n\t.reg .pred done;\n\tWAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra WAIT;\n\t}" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void bulk_copy(float* dst, const float* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// The map's box at element coordinates (w, h, d, c, n); outside the tensor: zeros. w must be a multiple of 4 (16 bytes:
// the H100 faults with "illegal instruction" on any other innermost coordinate, negative ones included).
__device__ __forceinline__ void tensor_copy(float* dst, const CUtensorMap* map, uint64_t* bar, int w, int h, int d, int c,
                                            int n) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(w), "r"(h), "r"(d), "r"(c), "r"(n), "r"(smem_addr(bar))
                 : "memory");
}

// The map's box (32, 1, 1, 64, 1) of the output at (w, h, d, c, n) from shared memory (128-byte swizzled); parts
// outside the tensor are not written.
__device__ __forceinline__ void tensor_store(const CUtensorMap* map, const float* src, int w, int h, int d, int c, int n) {
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];"
                 :: "l"(map), "r"(w), "r"(h), "r"(d), "r"(c), "r"(n), "r"(smem_addr(src)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__device__ __forceinline__ void store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void pair_barrier(int id) { asm volatile("bar.sync %0, 64;" :: "r"(id) : "memory"); }

constexpr int TMA_WWORDS = 16 * NB * CK;  // one stage's weights: 16 taps (2 W-parities x 8 slots) x 64 channels x 8
constexpr int ROW_WORDS = NB * 32;        // output staging per warp pair: [channel 64][w 32]
constexpr int STAGE_WORDS = (TD * TH) * ROW_WORDS;  // 64 KB at the 1024-byte aligned start of shared memory

// An A element as TF32 (the MMA reads bits 31-13 and ignores the rest). EXACT: cvt.rna, which costs two instructions
// (a test for Inf and NaN, then the add). Otherwise the add alone: half a TF32 unit (0x1000) into the bits, which the
// truncating MMA turns into round to nearest, ties away, the same as cvt.rna for every finite value and for Inf.
// Only a NaN whose bits 30-12 are all ones (such as the GPU's own NaN, 0x7fffffff) would carry into the sign and read
// as -0: scan_wrap flags inputs that hold one, and the kernels then take the EXACT path.
template <bool EXACT>
__device__ __forceinline__ uint32_t tf32_a(float v) {
    return EXACT ? round_tf32_bits(__float_as_uint(v)) : __float_as_uint(v) + 0x1000u;
}

// One stage (the weights are TF32 already: the packing kernels round them): this warp's 32 voxels x 64 channels +=
// the stage's 8 channels x the slots in mask (bit (sd 2 + sh) 2 + sw). xa: this thread's A element (channel tig, voxel
// gid of the warp's run) at slot 0; wb: its ldmatrix row of B at slot 0 of its W-parity. Every address is one of these
// plus a constant.
template <int XBW, int XBH, int XPLANE, bool EXACT>
__device__ __forceinline__ void stage_taps(float (&acc)[2][8][4], const float* wb, const float* xa, uint32_t mask) {
#pragma unroll
    for (int slot = 0; slot < 8; ++slot) {
        if (!((mask >> slot) & 1u)) continue;  // uniform per warp
        const float* p = xa + ((slot >> 2) * XBH + ((slot >> 1) & 1)) * XBW + (slot & 1);
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            a[mt][0] = tf32_a<EXACT>(p[16 * mt]);
            a[mt][1] = tf32_a<EXACT>(p[16 * mt + 8]);
            a[mt][2] = tf32_a<EXACT>(p[4 * XPLANE + 16 * mt]);
            a[mt][3] = tf32_a<EXACT>(p[4 * XPLANE + 16 * mt + 8]);
        }
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            uint32_t b[4];
            ldmatrix_x4(b, wb + (slot * NB + jj * 16) * CK);
            mma_tf32(acc[0][2 * jj], a[0], b[0], b[1]);
            mma_tf32(acc[1][2 * jj], a[1], b[0], b[1]);
            mma_tf32(acc[0][2 * jj + 1], a[0], b[2], b[3]);
            mma_tf32(acc[1][2 * jj + 1], a[1], b[2], b[3]);
        }
    }
}

// stage_taps with A rounded exactly where the input holds a NaN the add would lose (exact = *wrap != 0, wrap_flag):
// a branch uniform over the block.
template <int XBW, int XBH, int XPLANE>
__device__ __forceinline__ void stage_mma(float (&acc)[2][8][4], const float* wb, const float* xa, uint32_t mask,
                                          bool exact) {
    if (exact) stage_taps<XBW, XBH, XPLANE, true>(acc, wb, xa, mask);
    else stage_taps<XBW, XBH, XPLANE, false>(acc, wb, xa, mask);
}

// This thread's ldmatrix row of B (see stage_taps): swz((pw 8 + slot) 64 + 16 jj + b_row, b_c) minus the constants.
__device__ __forceinline__ int b_offset(int lane, int pw) {
    const int q = lane >> 3, r = lane & 7, b_row = r + 8 * (q >> 1), b_c = 4 * (q & 1);
    return (pw * 8 * NB + b_row) * CK + (b_c ^ (b_row & 4));
}

// The input window of a tile starts at w = ow0 - pad - window_shift(g), a multiple of 4 (ow0 is one, TW = 32), so the
// input at ow0 - pad sits window_shift(g) columns into the window: kernels add it to their A offsets.
__device__ __forceinline__ int window_shift(const Geometry& g) { return (-g.pad) & 3; }

// Per pipeline buffer: an mbarrier that completes when a stage's copies have landed in it, and the number of warps
// done with the stage it holds.
struct PipeSync {
    uint64_t full;
    unsigned done;
};

// Thread 0, before the block's first barrier: every buffer empty, no copy issued.
template <int NBUF>
__device__ __forceinline__ void pipe_init(PipeSync* sync) {
    for (int b = 0; b < NBUF; ++b) {
        mbar_init(&sync[b].full, 1);
        sync[b].done = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The persistent TMA pipeline over NBUF buffers of BUF words (WWORDS of weights first, then the input window;
// 128-byte multiples); sync: NBUF entries, set up by pipe_init. A tile's stages are its chunks of 8 input channels,
// each split into SLABS slabs (slab s: the window starts s planes deeper in d, and has its own weights, packed as
// [class][chunk][slab][WWORDS]). Per tile: mma(acc, buffer, origin, slab) per stage, then epilogue(acc, origin);
// tiles are TD x TILE_H x TW. No block-wide barrier per stage: each warp counts itself done with a buffer, and the
// last of them refills it with the stage NBUF later, so warps drift apart by up to a stage instead of waiting for the
// slowest at every stage.
template <int NBUF, int XWORDS, int BUF, int SLABS = 1, int WWORDS = TMA_WWORDS, int TILE_H = TH, typename Mma,
          typename Epilogue>
__device__ __forceinline__ void tma_pipeline(const CUtensorMap* xmap, const float* __restrict__ wt, const Geometry& g,
                                             float* bufs, PipeSync* sync, Mma&& mma, Epilogue&& epilogue) {
    static_assert(BUF % 32 == 0 && BUF >= WWORDS + XWORDS && WWORDS % 4 == 0, "buffers");
    const int tiles = (int)g.tiles, step = (int)gridDim.x, stages = g.chunks * SLABS;
    const int wlead = g.pad + window_shift(g);
    const unsigned warps = blockDim.x >> 5;
    // This block's stage k (0, 1, ...) is stage k % stages of tile blockIdx.x + (k / stages) step; one thread copies
    // it into buffer k % NBUF.
    auto issue = [&](int k, int b) {
        const int tile = (int)blockIdx.x + (k / stages) * step, s = k % stages;
        if (tile >= tiles) return;
        const TileOrigin o = tile_origin<TILE_H>(tile, g);
        float* buf = bufs + b * BUF;
        uint64_t* full = &sync[b].full;
        mbar_expect_tx(full, (WWORDS + XWORDS) * sizeof(float));
        bulk_copy(buf, wt + ((long long)o.cls * stages + s) * WWORDS, WWORDS * sizeof(float), full);
        tensor_copy(buf + WWORDS, xmap, full, o.ow0 - wlead, o.oh0 - g.pad, o.od0 - g.pad + s % SLABS, s / SLABS * CK,
                    o.n);
    };
    if (threadIdx.x == 0)
        for (int k = 0; k < NBUF; ++k) issue(k, k);
    int c_buf = 0, k = 0;
    uint32_t c_phase = 0;
    float acc[2][8][4];
    for (int tile = blockIdx.x; tile < tiles; tile += step) {
        const TileOrigin o = tile_origin<TILE_H>(tile, g);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
        for (int s = 0; s < stages; ++s, ++k) {
            mbar_wait(&sync[c_buf].full, c_phase);
            mma(acc, bufs + c_buf * BUF, o, s % SLABS);
            __syncwarp();  // the warp's shared-memory reads of this stage are done (their results fed its MMAs)
            if ((threadIdx.x & 31) == 0) {
                __threadfence_block();
                if (atomicAdd(&sync[c_buf].done, 1u) == warps - 1) {  // the last warp out refills the buffer
                    sync[c_buf].done = 0;  // released to the next users by the copy's mbarrier
                    issue(k + NBUF, c_buf);
                }
            }
            if (++c_buf == NBUF) { c_buf = 0; c_phase ^= 1; }
        }
        epilogue(acc, o);
    }
}

// Staging of the results (FAST epilogues): value (channel c = 8 j + 2 tig + e, w = 16 half + 2 gid + pw) of a warp
// pair's 64 x 32 block sits at c 32 + ((w / 4) ^ (c & 7)) 4 + w % 4 (TMA's 128-byte swizzle). With
// x_e = (gid / 2) ^ (2 tig + e) that is row + j 256 + (half 16 ^ base[e]): the half flips bit 4 only.
struct StagingSlots {
    float* row;
    int base[2];
    __device__ __forceinline__ StagingSlots(float* staging, int run, int gid, int tig, int pw) : row(staging + run * ROW_WORDS) {
#pragma unroll
        for (int e = 0; e < 2; ++e) base[e] = (2 * tig + e) * 32 + ((((gid >> 1) ^ (2 * tig + e)) & 7) << 2) + 2 * (gid & 1) + pw;
    }
};

// Each warp pair (warps run and run + 8) writes acc[mt] into its staging row and one thread stores it with one TMA
// copy at output (w0 + 32 mt, oh, od, channel 0, n); rows and columns past the output's end are clipped by the copy
// engine. A row is rewritten only after its previous store has read it.
__device__ __forceinline__ void store_tile(const float (&acc)[2][8][4], const StagingSlots& st, const CUtensorMap* omap,
                                           bool issuer, int run, int w0, int oh, int od, int n) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        if (issuer) store_wait_read();
        pair_barrier(1 + run);
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
                for (int j = 0; j < 8; ++j) st.row[j * 256 + ((half * 16) ^ st.base[e])] = acc[mt][j][half * 2 + e];
        async_proxy_fence();
        pair_barrier(1 + run);
        if (issuer) tensor_store(omap, st.row, w0 + 32 * mt, oh, od, 0, n);
    }
}

// *flag = 1 if x holds a NaN whose bits 30-12 are all ones (tf32_a's add would wrap it): one read of x. The kernels
// read the flag and take the exact rounding for such inputs.
__global__ void scan_wrap(const float* __restrict__ x, long long n, bool vec, unsigned* __restrict__ flag) {
    const long long stride = (long long)gridDim.x * blockDim.x, first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    auto wraps = [](float v) { return (__float_as_uint(v) & 0x7ffff000u) == 0x7ffff000u; };
    bool hit = false;
    long long i = first;
    if (vec) {  // 16-byte aligned: float4s, then the tail
        const float4* x4 = reinterpret_cast<const float4*>(x);
        for (; i < n / 4; i += stride) {
            const float4 v = x4[i];
            hit |= wraps(v.x) | wraps(v.y) | wraps(v.z) | wraps(v.w);
        }
        i = n / 4 * 4 + first;
    }
    for (; i < n; i += stride) hit |= wraps(x[i]);
    if (__any_sync(0xffffffffu, hit) && (threadIdx.x & 31) == 0) *flag = 1u;
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
    static EncodeTiled encode = nullptr;
    if (encode == nullptr) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        TORCH_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr, "tf32_igemm: no cuTensorMapEncodeTiled");
        encode = reinterpret_cast<EncodeTiled>(fn);
    }
    return encode;
}

// A float32 (d4, d3, d2, d1, d0) tensor whose rows have a pitch of pitch0 >= d0 elements (a multiple of 4), as a TMA
// map with this box.
CUtensorMap tensor_map(void* base, const cuuint64_t (&dims)[5], cuuint64_t pitch0, const cuuint32_t (&box)[5],
                       CUtensorMapSwizzle swizzle) {
    const cuuint64_t row = pitch0 * sizeof(float);
    const cuuint64_t strides[4] = {row, row * dims[1], row * dims[1] * dims[2], row * dims[1] * dims[2] * dims[3]};
    const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
    CUtensorMap map;
    const CUresult rc = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, base, dims, strides, box, unit,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TORCH_CHECK(rc == CUDA_SUCCESS, "tf32_igemm: cuTensorMapEncodeTiled failed (", (int)rc, ")");
    return map;
}

// The input as a TMA source with this box: x itself where its rows are 16-byte multiples on a 16-byte aligned base,
// else a copy padded to such rows (zeros past W). The copy, if any, is returned in keep and must outlive the kernel.
CUtensorMap input_map(const torch::Tensor& x, const Geometry& g, const cuuint32_t (&box)[5], torch::Tensor& keep) {
    const int wp = (g.W + 3) / 4 * 4;
    keep = x;
    if (wp != g.W || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0) {
        keep = torch::zeros({g.N, g.C, g.D, g.H, wp}, x.options());
        keep.narrow(4, 0, g.W).copy_(x);
    }
    return tensor_map(keep.data_ptr(), {(cuuint64_t)g.W, (cuuint64_t)g.H, (cuuint64_t)g.D, (cuuint64_t)g.C,
                      (cuuint64_t)g.N}, wp, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

// The flag scan_wrap sets for x (contiguous), for the kernels' rounding of A.
torch::Tensor wrap_flag(const torch::Tensor& x) {
    auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));
    const long long n = x.numel();
    const bool vec = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
    scan_wrap<<<(unsigned)std::min<long long>(((vec ? n / 4 : n) + 255) / 256, 1024), 256, 0,
                c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n, vec,
                                                     reinterpret_cast<unsigned*>(flag.data_ptr<int>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return flag;
}

// The output (N, K = 64, Do, Ho, Wo) as a TMA destination for store_tile (Wo a multiple of 4).
CUtensorMap output_map(const torch::Tensor& out, const Geometry& g) {
    return tensor_map(out.data_ptr(), {(cuuint64_t)g.Wo, (cuuint64_t)g.Ho, (cuuint64_t)g.Do, (cuuint64_t)g.K,
                      (cuuint64_t)g.N}, g.Wo, {32, 1, 1, NB, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
}
