namespace {

constexpr int CK = 8;           // input channels per K chunk (the MMA's k)
constexpr int NB = 64;          // output channels per block
constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int TD = 2, TH = 4, TW = 32;  // output voxels per tile: 256, one 32-voxel run along W per warp
constexpr int TILE_M = TD * TH * TW;

struct Geometry {
    int N, C, D, H, W;          // input
    int K, Do, Ho, Wo;          // output channels and sizes
    int pad;
    int chunks;                 // ceil(C / CK)
    int classes;                // output parity classes of a strided transposed convolution (1: a plain convolution)
    uint32_t masks[8];          // per class: which of the KS^3 taps exist (bit (kd * KS + kh) * KS + kw)
    int tiles_d, tiles_h, tiles_w;
    long long tiles;            // per 64-channel block
    int wsz, xsz, bsz;          // shared-memory words: weights, input tile, one pipeline buffer
    int resident;               // weights loaded once per block (one chunk, one class)
};

// Shared memory holds 8 channels per position (weights: per output channel) as two 16-byte halves; the halves
// swap on every fourth position, so the eight rows an ldmatrix phase reads always fall in distinct banks.
// ((c >> 2) ^ (pos >> 2)) & 1, shifted back to bit 2, is just (pos ^ c) & 4.
__device__ __forceinline__ int swz(int pos, int c) { return pos * CK + ((pos ^ c) & 4) + (c & 3); }

__device__ __forceinline__ uint32_t round_tf32_bits(uint32_t v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(v)));
    return r;
}

__device__ __forceinline__ float round_tf32(float v) { return __uint_as_float(round_tf32_bits(__float_as_uint(v))); }

// 2^x and 1 / x, one MUFU instruction each (relative errors about 2^-22 and 2^-23; 2^x below 2^-126 flushes to 0,
// which neither a softmax sum nor GELU's erfc can notice).
__device__ __forceinline__ float exp2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const float* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 4-byte asynchronous copy; src_bytes == 0 writes a zero (padding) without reading.
__device__ __forceinline__ void cp_async4(float* dst, const float* src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(d), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(d), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

struct TileOrigin { int n, od0, oh0, ow0, cls; };

// Tile index -> origin; the class varies fastest, so the blocks running at once cover all classes of one region.
// Tile indices fit in int (persistent_grid checks), so these are 32-bit divisions, not 64-bit library calls.
// TILE_H: the tile's height (TH, or a kernel's own).
template <int TILE_H = TH>
__device__ __forceinline__ TileOrigin tile_origin(int tile, const Geometry& g) {
    TileOrigin o;
    o.cls = (int)(tile % g.classes); tile /= g.classes;
    o.ow0 = (int)(tile % g.tiles_w) * TW; tile /= g.tiles_w;
    o.oh0 = (int)(tile % g.tiles_h) * TILE_H; tile /= g.tiles_h;
    o.od0 = (int)(tile % g.tiles_d) * TD; tile /= g.tiles_d;
    o.n = (int)tile;
    return o;
}

// Weights (packed on the host as [kblock][chunk][tap][k 64][ci 8], TF32-rounded) of TAPS taps into smem.
template <int TAPS, int NT>
__device__ __forceinline__ void copy_weights(const float* __restrict__ src, float* ws) {
    constexpr int ROWS = TAPS * NB;  // (tap, k) rows of 8 channels = two 16-byte halves
#pragma unroll 4
    for (int v = threadIdx.x; v < ROWS * 2; v += NT) {
        const int row = v >> 1, half = v & 1;
        cp_async16(ws + swz(row, half * 4), src + row * CK + half * 4);
    }
}

// Queue the copies of one pipeline stage: tile o's input for one chunk of channels, and the chunk's weights unless
// they are resident. NT threads.
template <int KS, int TPC, int NT>
__device__ __forceinline__ void issue_stage(const float* __restrict__ x, const float* __restrict__ wblock,
                                            const Geometry& g, const TileOrigin& o, int chunk, float* ws, float* xs) {
    constexpr int XD = TD + KS - 1, XH = TH + KS - 1, XW = TW + KS - 1;
    constexpr int NW = NT / 32, ROWS = CK * XD * XH, EXTRA = XW - 32;  // rows r = s CK + c, s = rd XH + rh
    static_assert(NW % CK == 0 && EXTRA >= 0 && EXTRA < 32, "one channel per warp; rows of 32 to 63 positions");
    if (!g.resident) {
        copy_weights<TPC, NT>(wblock + ((long long)o.cls * g.chunks + chunk) * TPC * NB * CK, ws);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int d0 = o.od0 - g.pad, h0 = o.oh0 - g.pad, w0 = o.ow0 - g.pad;
    const long long plane = (long long)g.H * g.W;
    // Positions 0-31 of each row: warp w copies channel w % CK of the rows s with s % STEP = w / CK, lane = position.
    // Row pointers advance by additions (no per-row index products to keep live across stages).
    {
        constexpr int STEP = NW / CK;
        const int c = warp % CK, ci = chunk * CK + c, sub = STEP == 1 ? 0 : warp / CK;
        const bool lane_ok = ci < g.C && (unsigned)(w0 + lane) < (unsigned)g.W;
        // Formed for every row, read only where the row is inside the input (elsewhere the copy writes zeros).
        const float* plane_src = x + ((((long long)o.n * g.C + ci) * g.D + d0) * plane + (long long)h0 * g.W + w0 + lane);
        float* dst = xs + lane * CK + (c & 3);  // swz(pos, c) = dst + 8 s XW + ((pos ^ c) & 4), pos = s XW + lane
#pragma unroll
        for (int rd = 0; rd < XD; ++rd, plane_src += plane) {
            const bool d_ok = lane_ok && (unsigned)(d0 + rd) < (unsigned)g.D;
            const float* src = plane_src;
#pragma unroll
            for (int rh = 0; rh < XH; ++rh, src += g.W) {
                const int s = rd * XH + rh;
                if (STEP > 1 && s % STEP != sub) continue;  // another warp's row (uniform per warp)
                const bool ok = d_ok && (unsigned)(h0 + rh) < (unsigned)g.H;
                cp_async4(dst + CK * s * XW + (((s * XW + lane) ^ c) & 4), ok ? src : x, ok ? 4 : 0);
            }
        }
    }
    // Positions 32.. of every row, EXTRA per row, spread over all threads.
#pragma unroll
    for (int k = 0; k < (ROWS * EXTRA + NT - 1) / NT; ++k) {
        const int f = k * NT + (int)threadIdx.x;
        if ((ROWS * EXTRA) % NT != 0 && f >= ROWS * EXTRA) break;
        const int r = f / EXTRA, i = 32 + f % EXTRA;
        const int c = r % CK, s = r / CK, rd = s / XH, rh = s % XH;
        const int ci = chunk * CK + c, id = d0 + rd, ih = h0 + rh, iw = w0 + i;
        const bool ok = ci < g.C && (unsigned)id < (unsigned)g.D && (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W;
        const float* src = ok ? x + ((((long long)o.n * g.C + ci) * g.D + id) * g.H + ih) * g.W + iw : x;
        cp_async4(xs + swz(s * XW + i, c), src, ok ? 4 : 0);
    }
}

// The input as TF32, rounded to nearest once per staged tile (cp.async copies raw float32 bits; the weights come
// pre-rounded). The TMA kernels round A fragments as they load them instead (tma.cu, tf32_a).
template <int NT>
__device__ __forceinline__ void round_tile(float* xs, int words) {
    for (int i = threadIdx.x; i < words; i += NT) xs[i] = round_tf32(xs[i]);
}

__device__ __forceinline__ void load_a(uint32_t (&a)[2][4], const float* p0, const float* p1) {
    ldmatrix_x4(a[0], p0);
    ldmatrix_x4(a[1], p1);
}

// Which voxel of the tile each accumulator row is: warp w owns the W-run (td, th) = (w / TH, w % TH), and its row
// m = 16 mt + 8 half + gid (gid = lane / 4) is the W offset.
__device__ __forceinline__ int row_position(int warp, int mt, int half, int r, int XH, int XW) {
    return ((warp / TH) * XH + warp % TH) * XW + 16 * mt + 8 * half + r;
}

// One stage of the implicit GEMM: this warp's 32 voxels x 64 channels += input x weights over the stage's taps.
template <int KS>
__device__ __forceinline__ void mma_stage(float (&acc)[2][8][4], const float* ws, const float* xs, uint32_t mask) {
    constexpr int XH = TH + KS - 1, XW = TW + KS - 1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // ldmatrix row supplied by this lane: matrix q = lane / 8 covers rows 8 (q & 1) .. +7 and channels 4 (q >> 1) .. +3.
    const int q = lane >> 3, r = lane & 7;
    const int a_pos0 = row_position(warp, 0, q & 1, r, XH, XW);
    const int a_pos1 = row_position(warp, 1, q & 1, r, XH, XW);
    const int a_c = 4 * (q >> 1);
    const int b_row = r + 8 * (q >> 1), b_c = 4 * (q & 1);       // B: matrices (j, k0-3), (j, k4-7), (j+1, ..), (j+1, ..)
#pragma unroll
    for (int kd = 0; kd < KS; ++kd)
#pragma unroll
        for (int kh = 0; kh < KS; ++kh)
#pragma unroll
            for (int kw = 0; kw < KS; ++kw) {
                const int tap = (kd * KS + kh) * KS + kw;
                if (!((mask >> tap) & 1u)) continue;  // uniform per block: a tap this class does not have
                const int shift = (kd * XH + kh) * XW + kw;
                uint32_t a[2][4];
                load_a(a, xs + swz(a_pos0 + shift, a_c), xs + swz(a_pos1 + shift, a_c));
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) {
                    uint32_t b[4];
                    ldmatrix_x4(b, ws + swz(tap * NB + jj * 16 + b_row, b_c));
                    mma_tf32(acc[0][2 * jj], a[0], b[0], b[1]);
                    mma_tf32(acc[1][2 * jj], a[1], b[0], b[1]);
                    mma_tf32(acc[0][2 * jj + 1], a[0], b[2], b[3]);
                    mma_tf32(acc[1][2 * jj + 1], a[1], b[2], b[3]);
                }
            }
}

// The persistent pipeline: each block walks tiles blockIdx.x, +gridDim.x, ...; stage (tile, chunk) is copied
// into one buffer while the previous stage is multiplied from the other. After a tile's last stage, epilogue(acc,
// origin) runs. KS: the input window per dimension; TPC: taps per chunk in the packed weights (KS^3); NT: threads
// per block. Stage cursors are plain counters: no divisions per stage.
template <int KS, int TPC, int NT = THREADS, typename Epilogue>
__device__ __forceinline__ void conv_pipeline(const float* __restrict__ x, const float* __restrict__ wt,
                                              const Geometry& g, Epilogue&& epilogue) {
    extern __shared__ __align__(16) float smem[];
    const float* wblock = wt + (long long)blockIdx.y * g.classes * g.chunks * TPC * NB * CK;
    auto wbuf = [&](int b) { return g.resident ? smem : smem + b * g.bsz; };
    auto xbuf = [&](int b) { return g.resident ? smem + g.wsz + b * g.xsz : smem + b * g.bsz + g.wsz; };
    auto issue = [&](const TileOrigin& o, int chunk, int b) {
        issue_stage<KS, TPC, NT>(x, wblock, g, o, chunk, wbuf(b), xbuf(b));
    };
    if (g.resident) copy_weights<TPC, NT>(wblock, smem);
    const int per_tile = g.chunks, tiles = (int)g.tiles, step = (int)gridDim.x;
    if ((int)blockIdx.x < tiles) issue(tile_origin(blockIdx.x, g), 0, 0);
    cp_async_commit();

    float acc[2][8][4];
    int b = 0;  // the buffer of the stage being multiplied
    for (int tile = blockIdx.x; tile < tiles; tile += step) {
        const TileOrigin o = tile_origin(tile, g);
        uint32_t mask = 0;  // g.masks[o.cls] without a runtime index into the parameters (a local-memory copy)
#pragma unroll
        for (int c = 0; c < 8; ++c) mask = c == o.cls ? g.masks[c] : mask;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
        for (int within = 0; within < per_tile; ++within, b ^= 1) {
            {   // The next stage: this tile's next chunk, else the next tile's first (one inlined copy).
                TileOrigin no = o;
                int next = within + 1;
                if (next == per_tile) {
                    next = 0;
                    no = tile_origin(tile + step, g);
                }
                if (next != 0 || tile + step < tiles) issue(no, next, b ^ 1);
            }
            cp_async_commit();
            cp_async_wait_one();
            __syncthreads();
            round_tile<NT>(xbuf(b), g.xsz);
            __syncthreads();
            mma_stage<KS>(acc, wbuf(b), xbuf(b), mask);
            __syncthreads();  // buffer b is refilled by the next stage's copies
        }
        epilogue(acc, o);
    }
    cp_async_wait_all();
}

// Tiles of TD x TILE_H x TW over an out_d x out_h x out_w grid (per class); a plain convolution has one class with
// every tap. TILE_H: as for tile_origin.
template <int TILE_H = TH>
void set_tiles(Geometry& g, int out_d, int out_h, int out_w, int classes = 1) {
    g.tiles_d = (out_d + TD - 1) / TD;
    g.tiles_h = (out_h + TILE_H - 1) / TILE_H;
    g.tiles_w = (out_w + TW - 1) / TW;
    g.classes = classes;
    g.tiles = (long long)g.N * g.tiles_d * g.tiles_h * g.tiles_w * classes;
    if (classes == 1) g.masks[0] = 0xffffffffu;
}

// Shared memory of a pipeline buffer: one stage's weights (all taps) and input tile.
void set_smem(Geometry& g, int KS, bool resident) {
    g.resident = resident;
    g.wsz = KS * KS * KS * NB * CK;
    g.xsz = CK * (TD + KS - 1) * (TH + KS - 1) * (TW + KS - 1);
    g.xsz = (g.xsz + 3) / 4 * 4;  // keep the next buffer 16-byte aligned
    g.bsz = g.wsz + g.xsz;
}

size_t smem_bytes(const Geometry& g) {
    return sizeof(float) * (g.resident ? (size_t)g.wsz + 2 * (size_t)g.xsz : 2 * (size_t)g.bsz);
}

// Weights (K, C, KS, KS, KS) as [kblock][chunk][tap][k 64][ci 8], zero-padded, rounded to TF32 (to nearest).
torch::Tensor pack_weights(const torch::Tensor& w, const Geometry& g, int KS) {
    const int kblocks = (g.K + NB - 1) / NB, KT = KS * KS * KS;
    auto wp = torch::zeros({kblocks * NB, g.chunks * CK, KS, KS, KS}, w.options());
    wp.narrow(0, 0, g.K).narrow(1, 0, g.C).copy_(w);
    auto wt = wp.view({kblocks, NB, g.chunks, CK, KT}).permute({0, 2, 4, 1, 3}).contiguous();
    auto bits = wt.view(torch::kInt32);
    return bits.add(0x1000).bitwise_and(~0x1FFF).view(torch::kFloat32);
}

Geometry input_geometry(const torch::Tensor& x, const torch::Tensor& w, int64_t pad) {
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    g.K = (int)w.size(0); g.pad = (int)pad;
    const int KS = (int)w.size(2);
    g.Do = g.D + 2 * g.pad - KS + 1; g.Ho = g.H + 2 * g.pad - KS + 1; g.Wo = g.W + 2 * g.pad - KS + 1;
    g.chunks = (g.C + CK - 1) / CK;
    return g;
}

template <typename Kernel>
dim3 persistent_grid(Kernel kernel, const Geometry& g, size_t smem, int threads = THREADS) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int device = 0, sms = 0, per_sm = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    TORCH_CHECK(per_sm > 0, "kernel does not fit on this GPU (shared memory)");
    const long long blocks = std::min(g.tiles, (long long)sms * per_sm);
    TORCH_CHECK(g.tiles + blocks <= INT_MAX, "too many tiles");  // the kernels count tiles in int
    return dim3((unsigned)blocks, (unsigned)((g.K + NB - 1) / NB));
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& w, const char* who) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), who, ": CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, who, ": float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(1) == x.size(1), who, ": shape mismatch");
    TORCH_CHECK(w.size(2) == 3 && w.size(3) == 3 && w.size(4) == 3, who, ": 3x3x3 kernels only");
    TORCH_CHECK(x.device() == w.device(), who, ": tensors on different devices");
}

