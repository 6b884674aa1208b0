// Stride-2 transposed convolution as 8 parity classes: output o = 2 j + p (per dimension) receives input i = j + s + dmin
// through kernel tap k = p + pad - 2 (s + dmin), for the slots s where that k exists. Each class is a plain
// 2x2x2-slot convolution over the input with the other slots masked off. A block takes one (d, h) parity pair
// (pair = 2 pd + ph) and both W-parities (SPLIT rows: warps 0-7 W-parity 0, warps 8-15 W-parity 1), so it writes
// whole W rows: both halves of every 32-byte sector of its stride-2 stores leave the block together.
constexpr int SLOTS = 2;
constexpr int SM_THREADS = 512;
// A stage (one chunk of 8 input channels of one tile) arrives by TMA: the weights of both W-parities as one bulk copy
// (packed in the shared-memory order, swizzle included), the input window as one 5-D tensor copy whose out-of-range
// parts the copy engine fills with zeros. Input window per stage: [channel 8][d TD + 1][h TH + 1][w XBW], w 33 used;
// 40 keeps rows 16-byte multiples and makes a channel plane 600 words: 600 % 32 == 24, so the A loads (lanes:
// channel tig, voxel gid) hit 32 distinct banks.
constexpr int XBW = 40, XBH = TH + 1, XBD = TD + 1;
constexpr int XPLANE = XBW * XBH * XBD;
constexpr int WWORDS = 2 * SLOTS * SLOTS * SLOTS * NB * CK;  // one stage's weights: 16 slots x 64 channels x 8
constexpr int XWORDS = CK * XPLANE;
constexpr int BUF_WORDS = (WWORDS + XWORDS + 31) / 32 * 32;  // 128-byte multiples: TMA destinations are 128-aligned
constexpr int NBUF = 3;                                      // stages in flight: two copies run during a stage's MMAs
// Output staging (FAST kernels): per warp pair (one (d, h) row of the tile), [channel 64][w 32] of one mt half, in
// TMA's 128-byte swizzle (16-byte chunk index ^= channel & 7), stored by one tensor copy per row and half.
constexpr int ROW_WORDS = NB * 32;
constexpr int STAGE_WORDS = (TD * TH) * ROW_WORDS;           // 64 KB, at the 1024-byte aligned start of shared memory
static_assert(XPLANE % 32 == 8 || XPLANE % 32 == 24, "A loads must not conflict");
static_assert(XBW >= TW + SLOTS - 1 && (XBW * 4) % 16 == 0, "input window rows");

__global__ void pack_transposed(const float* __restrict__ w, float* __restrict__ out, int C, int K, int ks, int pad,
                               int dmin, int chunks, long long total) {
    // out: [kblock][pair 4][chunk][pw 2][slot (sd, sh, sw)][k 64][ci 8], class = 2 pair + pw; TF32-rounded, zeros where
    // no tap or no channel; each (pw, slot, k) row of 8 in swz order, so that a stage's 32 KB are copied byte for byte.
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long t = i;
        const int ci8 = (int)(t % CK); t /= CK;
        const int n = (int)(t % NB); t /= NB;
        const int slot = (int)(t % (SLOTS * SLOTS * SLOTS)); t /= SLOTS * SLOTS * SLOTS;
        const int pw = (int)(t % 2); t /= 2;
        const int chunk = (int)(t % chunks); t /= chunks;
        const int cls = 2 * (int)(t % 4) + pw; t /= 4;
        const int kb = (int)t;
        const int ci = chunk * CK + ci8, co = kb * NB + n;
        const int kd = ((cls >> 2) & 1) + pad - 2 * (slot / 4 + dmin);
        const int kh = ((cls >> 1) & 1) + pad - 2 * ((slot / 2) % 2 + dmin);
        const int kw = (cls & 1) + pad - 2 * (slot % 2 + dmin);
        float v = 0.f;
        if (ci < C && co < K && kd >= 0 && kd < ks && kh >= 0 && kh < ks && kw >= 0 && kw < ks) {
            v = round_tf32(w[(((long long)ci * K + co) * ks + kd) * ks * ks + kh * ks + kw]);
        }
        out[i ^ ((i >> 3) & 4)] = v;  // row (i / 8)'s halves swapped where swz swaps them: a stage copies as is
    }
}

// 2^x, one MUFU.EX2 (relative error ~2^-22; results below 2^-126 flush to 0, which a softmax sum cannot notice).
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// sigmoid(p) for p in [0, 1] (a softmax probability): 0.5 + an odd minimax polynomial of degree 7, error 1.1e-7 in
// float32 (fitted on [0, 1.0001]); five FMA-pipe instructions instead of an exponential and a division.
__device__ __forceinline__ float sigmoid_unit(float p) {
    const float t = p * p;
    float r = -1.6942769e-04f;
    r = fmaf(r, t, 2.0539353e-03f);
    r = fmaf(r, t, -2.0825412e-02f);
    r = fmaf(r, t, 2.4999942e-01f);
    return fmaf(r, p, 0.5f);
}

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

// Box (XBW, XBH, XBD, CK, 1) of the input at element coordinates (w, h, d, c, n); outside the tensor: zeros.
__device__ __forceinline__ void tensor_copy(float* dst, const CUtensorMap* map, uint64_t* bar, int w, int h, int d, int c,
                                            int n) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(w), "r"(h), "r"(d), "r"(c), "r"(n), "r"(smem_addr(bar))
                 : "memory");
}

// Box (32, 1, 1, 64, 1) of the output at (w, h, d, c, n) from shared memory (128-byte swizzled); parts outside the
// tensor are not written.
__device__ __forceinline__ void tensor_store(const CUtensorMap* map, const float* src, int w, int h, int d, int c, int n) {
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];"
                 :: "l"(map), "r"(w), "r"(h), "r"(d), "r"(c), "r"(n), "r"(smem_addr(src)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__device__ __forceinline__ void store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void pair_barrier(int id) { asm volatile("bar.sync %0, 64;" :: "r"(id) : "memory"); }

// One stage: this warp's 32 voxels x 64 channels += the stage's 8 channels x the taps of its class (mask bit = slot).
// xa: this thread's A element (channel tig, voxel gid of the warp's run) at slot 0; wb: its ldmatrix row of B at
// slot 0 of its W-parity. Every address below is one of these plus a constant.
__device__ __forceinline__ void stage_mma(float (&acc)[2][8][4], const float* wb, const float* xa, uint32_t mask) {
#pragma unroll
    for (int slot = 0; slot < SLOTS * SLOTS * SLOTS; ++slot) {
        if (!((mask >> slot) & 1u)) continue;  // uniform per warp
        const float* p = xa + ((slot >> 2) * XBH + ((slot >> 1) & 1)) * XBW + (slot & 1);
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            a[mt][0] = round_tf32_bits(__float_as_uint(p[16 * mt]));
            a[mt][1] = round_tf32_bits(__float_as_uint(p[16 * mt + 8]));
            a[mt][2] = round_tf32_bits(__float_as_uint(p[4 * XPLANE + 16 * mt]));
            a[mt][3] = round_tf32_bits(__float_as_uint(p[4 * XPLANE + 16 * mt + 8]));
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

// FAST: 64 output channels and an output row pitch of 16-byte multiples: results leave through shared memory by TMA
// stores (omap). Otherwise one guarded store per value (omap unused).
template <bool FAST>
__global__ void __launch_bounds__(SM_THREADS, 1)
convt3d_tf32_softmax_sigmoid(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap omap,
                             const float* __restrict__ wt, const float* __restrict__ bias, float* __restrict__ out,
                             const Geometry g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The dynamic shared memory base is 1024-byte aligned (as TMA with 128-byte swizzling requires of it); taking it
    // as is keeps the compiler's knowledge that these are shared addresses (LDS, not generic loads).
    extern __shared__ __align__(1024) float smem_base[];
    float* const staging = smem_base;
    float* const smem = smem_base + STAGE_WORDS;  // the pipeline buffers
    float* const bias_s = smem + NBUF * BUF_WORDS;  // [tig][2 j + e] = bias(8 j + 2 tig + e) * log2(e); -inf past K
    uint64_t* const full = reinterpret_cast<uint64_t*>(bias_s + NB);  // per buffer: its stage has arrived
    constexpr float LOG2E = 1.4426950408889634f;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int pw = warp >> 3, run = warp & 7, td = run / TH, th = run % TH;
    if (tid < NB) {
        const int t = tid >> 4, i = tid & 15, k = 8 * (i >> 1) + 2 * t + (i & 1);
        bias_s[tid] = k < g.K ? bias[k] * LOG2E : -INFINITY;
    }
    if (tid == 0) {
        if (FAST && (smem_addr(staging) & 1023u) != 0) __trap();  // the 128-byte swizzle repeats every 1024 bytes
        for (int b = 0; b < NBUF; ++b) mbar_init(full + b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int tiles = (int)g.tiles, step = (int)gridDim.x, chunks = g.chunks;
    // The producer is thread 0: stage (p_tile, p_chunk) into buffer p_buf, NBUF - 1 stages ahead of the MMAs.
    int p_tile = blockIdx.x, p_chunk = 0, p_buf = 0;
    auto issue = [&]() {
        if (p_tile < tiles) {
            const TileOrigin o = tile_origin(p_tile, g);
            float* buf = smem + p_buf * BUF_WORDS;
            mbar_expect_tx(full + p_buf, (WWORDS + XWORDS) * sizeof(float));
            bulk_copy(buf, wt + ((long long)o.cls * chunks + p_chunk) * WWORDS, WWORDS * sizeof(float), full + p_buf);
            tensor_copy(buf + WWORDS, &xmap, full + p_buf, o.ow0 - g.pad, o.oh0 - g.pad, o.od0 - g.pad, p_chunk * CK, o.n);
        }
        if (++p_chunk == chunks) { p_chunk = 0; p_tile += step; }
        if (++p_buf == NBUF) p_buf = 0;
    };
    if (tid == 0)
        for (int i = 0; i < NBUF - 1; ++i) issue();

    // This thread's fixed offsets into a buffer (see stage_mma).
    const int q = lane >> 3, r = lane & 7;
    const int a_off = WWORDS + tig * XPLANE + (td * XBH + th) * XBW + gid;
    const int b_row = r + 8 * (q >> 1), b_c = 4 * (q & 1);
    const int b_off = (pw * 8 * NB + b_row) * CK + (b_c ^ (b_row & 4));  // swz((pw 8 + slot) 64 + 16 jj + b_row, b_c)
    const long long cstride = (long long)g.Do * g.Ho * g.Wo;  // between output channels; K cstride < 2^31 (host)
    // Staging: value (channel c = 8 j + 2 tig + e, w = 16 half + 2 gid + pw) of this pair's row sits at
    // c 32 + ((w / 4) ^ (c & 7)) 4 + w % 4. With x_e = (gid / 2) ^ (2 tig + e) that is st_slot + j 256 + (half 16 ^
    // st_base[e]): the half only flips bit 4 of the chunk index, and st_base holds everything else.
    float* const st_slot = staging + run * ROW_WORDS;
    int st_base[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) st_base[e] = (2 * tig + e) * 32 + ((((gid >> 1) ^ (2 * tig + e)) & 7) << 2) + 2 * (gid & 1) + pw;
    int c_buf = 0;
    uint32_t c_phase = 0;
    float acc[2][8][4];
    for (int tile = blockIdx.x; tile < tiles; tile += step) {
        const TileOrigin o = tile_origin(tile, g);
        uint32_t mask = 0;  // g.masks[o.cls] without a runtime index into the parameters
#pragma unroll
        for (int c = 0; c < 4; ++c) mask = c == o.cls ? g.masks[c] : mask;
        mask = (mask >> (8 * pw)) & 0xffu;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
        for (int chunk = 0; chunk < chunks; ++chunk) {
            if (tid == 0) issue();  // into the buffer the barrier at the end of the last stage released
            mbar_wait(full + c_buf, c_phase);
            const float* buf = smem + c_buf * BUF_WORDS;
            stage_mma(acc, buf + b_off, buf + a_off, mask);
            __syncthreads();  // every warp is done with buffer c_buf: the next issue() may refill it
            if (++c_buf == NBUF) { c_buf = 0; c_phase ^= 1; }
        }

        // Accumulator (mt, j, half * 2 + e): voxel w = 16 mt + 8 half + gid of this warp's run, channel 8 j + 2 tig + e.
        // The 64 channels of a voxel sit in the four threads tig = 0..3 of a quad: softmax = two shuffles each way.
        // Two passes: the results first replace the accumulators, then all 64 are stored (no load after a store).
        const float4* const bq = reinterpret_cast<const float4*>(bias_s + 16 * tig);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float v[16];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float4 b4 = bq[i];
                    v[4 * i] = b4.x; v[4 * i + 1] = b4.y; v[4 * i + 2] = b4.z; v[4 * i + 3] = b4.w;
                }
                float mx = -INFINITY;
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    v[i] = fmaf(acc[mt][i >> 1][half * 2 + (i & 1)], LOG2E, v[i]);  // log2(e) (value + bias)
                    mx = fmaxf(mx, v[i]);
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                float sum = 0.f;
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    v[i] = exp2_approx(v[i] - mx);  // e^(value - max); -inf (no channel) gives 0
                    sum += v[i];
                }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                const float inv = __fdividef(1.f, sum);  // sum in [1, 64]
#pragma unroll
                for (int i = 0; i < 16; ++i) acc[mt][i >> 1][half * 2 + (i & 1)] = sigmoid_unit(v[i] * inv);
            }
        }
        const int od = 2 * (o.od0 + td) + (o.cls >> 1), oh = 2 * (o.oh0 + th) + (o.cls & 1);
        if (FAST) {
            // Per half mt: the pair's 64 x 32 results into its staging row, then one TMA store of them (rows and
            // columns past the output's end are clipped by the copy engine). The row is reused once the previous
            // store has read it.
            const bool issuer = pw == 0 && lane == 0;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                if (issuer) store_wait_read();
                pair_barrier(1 + run);
#pragma unroll
                for (int half = 0; half < 2; ++half)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
#pragma unroll
                        for (int j = 0; j < 8; ++j) st_slot[(j * 8 * 32) + ((half * 16) ^ st_base[e])] = acc[mt][j][half * 2 + e];
                async_proxy_fence();
                pair_barrier(1 + run);
                if (issuer) tensor_store(&omap, staging + run * ROW_WORDS, 2 * (o.ow0 + 16 * mt), oh, od, 0, o.n);
            }
        } else if (od < g.Do && oh < g.Ho) {
            // Element offsets within sample n's output fit in 32 bits (host check): one IMAD and one wide IMAD per store.
            float* const sample = out + (long long)o.n * g.K * cstride;
            const unsigned cs = (unsigned)cstride;
            const unsigned line = 2u * tig * cs + ((unsigned)od * g.Ho + oh) * g.Wo;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int ow = 2 * (o.ow0 + 16 * mt + 8 * half + gid) + pw;
                    if (ow >= g.Wo) continue;
#pragma unroll
                    for (int j = 0; j < 8; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            if (j * 8 + 2 * tig + e < g.K) sample[line + ow + (8u * j + e) * cs] = acc[mt][j][half * 2 + e];
                }
            }
        }
    }
    if (FAST && pw == 0 && lane == 0) store_wait_all();  // shared memory stays until the last stores have read it
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The input (N, C, D, H, W) as a TMA tensor map with this kernel's box; row pitch wp (a multiple of 4) >= W.
EncodeTiled encoder() {
    static EncodeTiled encode = nullptr;
    if (encode == nullptr) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        TORCH_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr, "convt3d_softmax_sigmoid: no cuTensorMapEncodeTiled");
        encode = reinterpret_cast<EncodeTiled>(fn);
    }
    return encode;
}

// A float32 (d4, d3, d2, d1, d0) tensor with rows of pitch pitch0 >= d0 elements (a multiple of 4), as a TMA map.
CUtensorMap tensor_map(void* base, const cuuint64_t (&dims)[5], cuuint64_t pitch0, const cuuint32_t (&box)[5],
                       CUtensorMapSwizzle swizzle) {
    const cuuint64_t row = pitch0 * sizeof(float);
    const cuuint64_t strides[4] = {row, row * dims[1], row * dims[1] * dims[2], row * dims[1] * dims[2] * dims[3]};
    const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
    CUtensorMap map;
    const CUresult rc = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, base, dims, strides, box, unit,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TORCH_CHECK(rc == CUDA_SUCCESS, "convt3d_softmax_sigmoid: cuTensorMapEncodeTiled failed (", (int)rc, ")");
    return map;
}

}  // namespace

// x: (N, C, D, H, W); w: (C, K <= 64, ks, ks, ks) float32 CUDA, a ConvTranspose3d weight with stride 2 whose taps
// fall into two slots per dimension (e.g. ks 3, padding 1). Returns sigmoid(softmax_channels(convT(x) + bias)).
torch::Tensor convt3d_softmax_sigmoid(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad, int64_t out_pad) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && bias.is_cuda(), "convt3d_softmax_sigmoid: CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "convt3d_softmax_sigmoid: float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(0) == x.size(1), "convt3d_softmax_sigmoid: shape mismatch");
    const int ks = (int)w.size(2);
    TORCH_CHECK(w.size(3) == ks && w.size(4) == ks, "convt3d_softmax_sigmoid: cubic kernels only");
    TORCH_CHECK(w.size(1) <= NB && bias.numel() == w.size(1), "convt3d_softmax_sigmoid: up to 64 output channels");
    // Slots per dimension: delta = (p + pad - k) / 2 over the taps k of both parities p.
    int dmin = 1 << 20, dmax = -(1 << 20);
    for (int p = 0; p < 2; ++p)
        for (int k = 0; k < ks; ++k)
            if ((p + pad - k) % 2 == 0) { dmin = std::min(dmin, (int)(p + pad - k) / 2); dmax = std::max(dmax, (int)(p + pad - k) / 2); }
    TORCH_CHECK(dmax - dmin + 1 == SLOTS, "convt3d_softmax_sigmoid: the kernel needs 2 slots per dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto wc = w.contiguous();
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    g.K = (int)w.size(1); g.pad = -dmin;
    g.Do = (g.D - 1) * 2 - 2 * (int)pad + ks + (int)out_pad;
    g.Ho = (g.H - 1) * 2 - 2 * (int)pad + ks + (int)out_pad;
    g.Wo = (g.W - 1) * 2 - 2 * (int)pad + ks + (int)out_pad;
    g.chunks = (g.C + CK - 1) / CK;
    auto out = torch::empty({g.N, g.K, g.Do, g.Ho, g.Wo}, x.options());
    if (out.numel() == 0) return out;
    // Which slots each class has (the same formula as the packing kernel).
    for (int cls = 0; cls < 8; ++cls) {
        uint32_t mask = 0;
        for (int slot = 0; slot < 8; ++slot) {
            const int k3[3] = {((cls >> 2) & 1) + (int)pad - 2 * (slot / 4 + dmin),
                               ((cls >> 1) & 1) + (int)pad - 2 * ((slot / 2) % 2 + dmin),
                               (cls & 1) + (int)pad - 2 * (slot % 2 + dmin)};
            bool ok = true;
            for (int d = 0; d < 3; ++d) ok = ok && k3[d] >= 0 && k3[d] < ks;
            if (ok) mask |= 1u << slot;
        }
        g.masks[cls >> 1] |= mask << (8 * (cls & 1));  // pair cls / 2: W-parity 0 in bits 0-7, 1 in bits 8-15
    }
    const long long total = 8LL * g.chunks * SLOTS * SLOTS * SLOTS * NB * CK;
    auto wt = torch::empty({total}, w.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    pack_transposed<<<(unsigned)std::min<long long>((total + 255) / 256, 4096), 256, 0, stream>>>(
        wc.data_ptr<float>(), wt.data_ptr<float>(), g.C, g.K, ks, (int)pad, dmin, g.chunks, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto b = bias.contiguous();
    set_tiles(g, (g.Do + 1) / 2, (g.Ho + 1) / 2, (g.Wo + 1) / 2, 4);
    TORCH_CHECK((long long)g.K * g.Do * g.Ho * g.Wo <= INT_MAX, "convt3d_softmax_sigmoid: over 2^31 outputs per sample");
    // TMA reads rows whose pitch is a multiple of 16 bytes from a 16-byte aligned base: otherwise, a padded copy.
    const int wp = (g.W + 3) / 4 * 4;
    auto xs = x;
    if (wp != g.W || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0) {
        xs = torch::zeros({g.N, g.C, g.D, g.H, wp}, x.options());
        xs.narrow(4, 0, g.W).copy_(x);
    }
    const CUtensorMap xmap = tensor_map(xs.data_ptr(), {(cuuint64_t)g.W, (cuuint64_t)g.H, (cuuint64_t)g.D,
                                        (cuuint64_t)g.C, (cuuint64_t)g.N}, wp, {XBW, XBH, XBD, CK, 1},
                                        CU_TENSOR_MAP_SWIZZLE_NONE);
    const bool fast = g.K == NB && g.Wo % 4 == 0;  // out comes from torch::empty: 256-byte aligned
    const CUtensorMap omap = fast ? tensor_map(out.data_ptr(), {(cuuint64_t)g.Wo, (cuuint64_t)g.Ho, (cuuint64_t)g.Do,
                                              (cuuint64_t)g.K, (cuuint64_t)g.N}, g.Wo, {32, 1, 1, NB, 1},
                                              CU_TENSOR_MAP_SWIZZLE_128B) : xmap;
    const size_t smem = sizeof(float) * ((size_t)STAGE_WORDS + (size_t)NBUF * BUF_WORDS + NB) + NBUF * sizeof(uint64_t);
    auto kernel = fast ? convt3d_tf32_softmax_sigmoid<true> : convt3d_tf32_softmax_sigmoid<false>;
    dim3 grid = persistent_grid(kernel, g, smem, SM_THREADS);
    // Pairs differ in work (2 to 16 taps): an odd grid makes each block cycle through all of them.
    if (grid.x % 2 == 0 && grid.x > 1 && (long long)grid.x < g.tiles) grid.x -= 1;
    kernel<<<grid, SM_THREADS, smem, stream>>>(xmap, omap, wt.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
