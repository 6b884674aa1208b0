"""Stride-2 ConvTranspose3d (kernel 4) on TF32 tensor cores with LayerNorm over W, GELU and scaling fused.

With kernel 4, stride 2 and padding 1 every output voxel o = 2j + p (per dimension) takes exactly two taps per
dimension, k = 3 - p - 2s from input j + p - 1 + s (s = 0, 1): the transposed convolution is 8 parity classes of a 2 x
2 x 2 convolution, with no zero taps. A block takes one (d, h) parity class and both W parities: warps 0-7 compute
W-parity 0 and warps 8-15 W-parity 1 of the same 8 rows of 32, so each block holds whole W rows (all 64 output widths)
of all 64 channels in registers (mma.sync m16n8k8, TF32 inputs rounded to nearest, float32 accumulation). The
LayerNorm over W is then two shuffle reductions per channel and row plus one exchange with the partner warp through
shared memory (mean first, then the variance around it; a barrier of the two warps only, so the other pairs go on
with their MMAs), and GELU (erf to 1.5e-7 by Abramowitz and Stegun 7.1.26) and
scaling follow. Persistent blocks walk the tiles with the classes fastest. Copies are TMA (Hopper): one thread starts
each stage's two copies (the weights of one 8-channel chunk, packed per class by one small kernel per call in
shared-memory order, as one bulk copy; the input window as one 5-D tensor copy, zero-filled outside the input), two
stages in flight on mbarriers; the last warp done with a stage starts the copy into its buffer, so no block-wide
barrier runs per stage. Results leave the same way: each pair of warps writes its 64 channels x 32 widths into shared
memory in TMA's 128-byte swizzle and one thread stores them with one tensor copy, which also clips the output's edges
(64 channels, so an output width of 64; otherwise one guarded store per value). The kernel needs sm_90 or later; older
GPUs take the fallback.

This is the shape of the problem's module (ConvTranspose3d(k=4, s=2, p=1) followed by LayerNorm over the last axis, up
to 64 output channels and output width <= 64, which must equal the LayerNorm's size); any other shape falls back to
cuDNN plus the same ops in PyTorch. TF32 is the precision PyTorch's defaults allow cuDNN for convolutions
(docs/solutions.md has the error figures).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = ("torch::Tensor convt3d_layernorm_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor gamma, "
        "torch::Tensor beta, double eps, double scale);")

_CUDA = r"""
#include <torch/extension.h>
#include <cuda.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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
constexpr int LN_THREADS = 512;  // 16 warps: 8 rows x 2 W-parities
// Input window per stage (TMA staging): [channel 8][d TD + 3][h TH + 2][w 44], w 34 used after the 16-byte alignment
// shift (window_shift: 3 at padding 1). d needs TD + 2 planes; with 5 planes of 6 x 44 a channel plane is 1320 words
// (1320 % 32 == 8: conflict-free A loads), where 4 planes or rows of 40 would give 0 or 16.
constexpr int LXBW = 44, LXBH = TH + 2, LXBD = TD + 3;
constexpr int LXPLANE = LXBW * LXBH * LXBD;
constexpr int LXWORDS = CK * LXPLANE;
constexpr int LBUF = (TMA_WWORDS + LXWORDS + 31) / 32 * 32;
constexpr int LNBUF = 2;  // two 75 KB stages + 64 KB of output staging + the reductions fit in 227 KB
static_assert(LXPLANE % 32 == 8 || LXPLANE % 32 == 24, "A loads must not conflict");
static_assert(LXBW >= TW + 2 + 3 && (LXBW * 4) % 16 == 0, "input window rows");

__global__ void pack_pairs(const float* __restrict__ w, float* __restrict__ out, int C, int K, int chunks, long long total) {
    // out: [class (pd, ph) 4][chunk][pw][sd][sh][sw][k 64][ci 8], tap k_dim = 3 - p - 2 s; TF32-rounded, zero-padded;
    // each row of 8 in swz order.
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long t = i;
        const int ci8 = (int)(t % CK); t /= CK;
        const int n = (int)(t % NB); t /= NB;
        const int tap = (int)(t % 16); t /= 16;
        const int chunk = (int)(t % chunks); t /= chunks;
        const int cls = (int)t;
        const int pw = tap >> 3, sd = (tap >> 2) & 1, sh = (tap >> 1) & 1, sw = tap & 1;
        const int kd = 3 - (cls >> 1) - 2 * sd, kh = 3 - (cls & 1) - 2 * sh, kw = 3 - pw - 2 * sw;
        const int ci = chunk * CK + ci8;
        float v = 0.f;
        if (ci < C && n < K) v = round_tf32(w[(((long long)ci * K + n) * 4 + kd) * 16 + kh * 4 + kw]);
        out[i ^ ((i >> 3) & 4)] = v;  // row (i / 8)'s halves swapped where swz swaps them: a stage copies as is
    }
}

// GELU(y) = y Phi(y) with Phi(y) = 1 - E for y >= 0 and E for y < 0, E = erfc(|y| / sqrt 2) / 2 from Abramowitz and
// Stegun 7.1.26 (t = 1 / (1 + 0.3275911 z), erfc(z) = t P(t) e^(-z^2), absolute error of erf at most 1.5e-7): 16
// instructions against erff's 28, with no coefficient selects. In float32 it is within 4.2e-7 of GELU in float64 over
// [-12, 12] (and so everywhere: beyond, E is below 1e-32).
__device__ __forceinline__ float gelu_erf(float y) {
    const float z = fabsf(y) * 0.70710678118654752f;
    const float t = rcp_approx(fmaf(0.3275911f, z, 1.f));
    float p = 0.5f * 1.061405429f;  // P / 2
    p = fmaf(p, t, 0.5f * -1.453152027f);
    p = fmaf(p, t, 0.5f * 1.421413741f);
    p = fmaf(p, t, 0.5f * -0.284496736f);
    p = fmaf(p, t, 0.5f * 0.254829592f);
    const float e = exp2_approx(y * (y * -0.72134752044448170f));  // e^(-y^2 / 2) = e^(-z^2)
    const float E = p * t * e;
    return y * (y >= 0.f ? 1.f - E : E);
}

// FAST: 64 output channels, so an output width of 64 (the LayerNorm's size is the channel count): every accumulator
// is a valid output, and results leave through shared memory by TMA stores (omap).
// Otherwise one guarded store per value (omap unused).
template <bool FAST>
__global__ void __launch_bounds__(LN_THREADS, 1)
convt3d_tf32_layernorm_gelu(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap omap,
                            const float* __restrict__ wt, const float* __restrict__ bias,
                            const float* __restrict__ gamma, const float* __restrict__ beta, float* __restrict__ out,
                            const unsigned* __restrict__ wrap, const Geometry g, float eps, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(1024) float smem_base[];  // 1024-aligned base: see the softmax kernel
    float* const staging = smem_base;
    float* const bufs = smem_base + STAGE_WORDS;
    float* const red = bufs + LNBUF * LBUF;  // [2 passes][16 warps][64 channels]
    PipeSync* const sync = reinterpret_cast<PipeSync*>(red + 2 * 16 * NB);  // per buffer: landed, warps done
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int pw = warp >> 3, row = warp & 7, td = row / TH, th = row % TH;
    if (threadIdx.x == 0) pipe_init<LNBUF>(sync);
    __syncthreads();
    const float inv_w = 1.f / g.Wo;
    // A: input (td + pd + sd, th + ph + sh, 16 mt + gid + pw + sw) of the window for output class (pd, ph, pw).
    const int a_off = TMA_WWORDS + tig * LXPLANE + (td * LXBH + th) * LXBW + gid + pw + window_shift(g);
    const int b_off = b_offset(lane, pw);
    const StagingSlots st(staging, row, gid, tig, pw);
    const bool exact = *wrap != 0u;  // x holds a NaN the fast TF32 rounding would lose (tf32_a)
    tma_pipeline<LNBUF, LXWORDS, LBUF>(&xmap, wt, g, bufs, sync, [&](float (&acc)[2][8][4], const float* buf, const TileOrigin& o, int) {
        const int cls_off = ((o.cls >> 1) * LXBH + (o.cls & 1)) * LXBW;
        stage_mma<LXBW, LXBH, LXPLANE>(acc, buf + b_off, buf + a_off + cls_off, 0xffu, exact);
    }, [&](float (&acc)[2][8][4], const TileOrigin& o) {
        // Accumulator (mt, j, half * 2 + e): output w = 2 (16 mt + 8 half + gid) + pw, channel 8 j + 2 tig + e.
        // A LayerNorm row (n, channel, d, h) is this warp's 32 values and warp ^ 8's 32 of the other W-parity.
        const int od = 2 * (o.od0 + td) + (o.cls >> 1), oh = 2 * (o.oh0 + th) + (o.cls & 1);
        bool valid[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) valid[mt][half] = FAST || 2 * (16 * mt + 8 * half + gid) + pw < g.Wo;
        // Pass 0 turns acc into value - mean in place (so no mean array stays live), pass 1 gives rstd.
        float rstd[8][2];
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float b = pass ? 0.f : __ldg(bias + min(j * 8 + 2 * tig + e, g.K - 1));
                    float s = 0.f;
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            const float v = acc[mt][j][half * 2 + e] + b;
                            s += valid[mt][half] ? (pass ? v * v : v) : 0.f;
                        }
                    s += __shfl_xor_sync(0xffffffffu, s, 4);
                    s += __shfl_xor_sync(0xffffffffu, s, 8);
                    s += __shfl_xor_sync(0xffffffffu, s, 16);
                    if (gid == 0) red[(pass * 16 + warp) * NB + j * 8 + 2 * tig + e] = s;
                }
            }
            pair_barrier(1 + row);  // the exchange is between this warp and its partner (warp ^ 8) only
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int c = j * 8 + 2 * tig + e;
                    const float total = red[(pass * 16 + warp) * NB + c] + red[(pass * 16 + (warp ^ 8)) * NB + c];
                    if (pass == 0) {
                        const float b = __ldg(bias + min(c, g.K - 1)), mean = total * inv_w;
#pragma unroll
                        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                            for (int half = 0; half < 2; ++half) acc[mt][j][half * 2 + e] = acc[mt][j][half * 2 + e] + b - mean;
                    } else {
                        rstd[j][e] = rsqrtf(total * inv_w + eps);
                    }
                }
            }
        }
        if (FAST) {
            // Rows past the output's height are computed and clipped by the store (the width is 64: all valid).
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int ow = min(2 * (16 * mt + 8 * half + gid) + pw, g.Wo - 1);
                    const float ga = __ldg(gamma + ow), be = __ldg(beta + ow);
#pragma unroll
                    for (int j = 0; j < 8; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float y = acc[mt][j][half * 2 + e] * rstd[j][e] * ga + be;
                            acc[mt][j][half * 2 + e] = gelu_erf(y) * scale;
                        }
                }
            store_tile(acc, st, &omap, pw == 0 && lane == 0, row, 0, oh, od, o.n);
            return;
        }
        if (od >= g.Do || oh >= g.Ho) return;
        float* const line = out + ((((long long)o.n * g.K + 2 * tig) * g.Do + od) * g.Ho + oh) * g.Wo;
        const long long cstride = (long long)g.Do * g.Ho * g.Wo;  // between output channels
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int ow = 2 * (16 * mt + 8 * half + gid) + pw;
                if (!valid[mt][half]) continue;
                const float ga = __ldg(gamma + ow), be = __ldg(beta + ow);
                float* dst = line + ow;
#pragma unroll
                for (int j = 0; j < 8; ++j, dst += 8 * cstride) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        if (j * 8 + 2 * tig + e >= g.K) continue;
                        const float y = acc[mt][j][half * 2 + e] * rstd[j][e] * ga + be;
                        dst[e * cstride] = gelu_erf(y) * scale;
                    }
                }
            }
    });
    if (FAST && pw == 0 && lane == 0) store_wait_all();  // shared memory stays until the last stores have read it
#endif
}

}  // namespace

// x: (N, C, D, H, W); w: (C, K <= 64, 4, 4, 4), a ConvTranspose3d weight (stride 2, padding 1, no output padding);
// gamma, beta: the LayerNorm's (2 W <= 64 values). Returns gelu(layernorm_W(convT(x) + bias)) * scale.
torch::Tensor convt3d_layernorm_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor gamma,
                                     torch::Tensor beta, double eps, double scale) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && bias.is_cuda() && gamma.is_cuda() && beta.is_cuda(),
                "convt3d_layernorm_gelu: CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "convt3d_layernorm_gelu: float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(0) == x.size(1) && w.size(2) == 4 && w.size(3) == 4 &&
                w.size(4) == 4, "convt3d_layernorm_gelu: weight (C, K, 4, 4, 4) expected");
    TORCH_CHECK(w.size(1) <= NB && bias.numel() == w.size(1), "convt3d_layernorm_gelu: up to 64 output channels");
    TORCH_CHECK(2 * x.size(4) <= 2 * TW && gamma.numel() == 2 * x.size(4) && beta.numel() == 2 * x.size(4),
                "convt3d_layernorm_gelu: the normalized output width must be <= 64 and match gamma/beta");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto wc = w.contiguous(), b = bias.contiguous(), ga = gamma.contiguous(), be = beta.contiguous();
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    g.K = (int)w.size(1); g.pad = 1;
    g.Do = 2 * g.D; g.Ho = 2 * g.H; g.Wo = 2 * g.W;
    g.chunks = (g.C + CK - 1) / CK;
    auto out = torch::empty({g.N, g.K, g.Do, g.Ho, g.Wo}, x.options());
    if (out.numel() == 0) return out;
    const long long total = 4LL * g.chunks * 16 * NB * CK;
    auto wt = torch::empty({total}, w.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    pack_pairs<<<(unsigned)std::min<long long>((total + 255) / 256, 4096), 256, 0, stream>>>(
        wc.data_ptr<float>(), wt.data_ptr<float>(), g.C, g.K, g.chunks, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    set_tiles(g, g.D, g.H, g.W, 4);
    torch::Tensor x_keep;  // the padded copy of x, if input_map makes one
    const CUtensorMap xmap = input_map(x, g, {LXBW, LXBH, LXBD, CK, 1}, x_keep);
    const torch::Tensor wrap = wrap_flag(x);
    const bool fast = g.K == NB && g.Wo == 2 * TW;  // out comes from torch::empty: 256-byte aligned
    const CUtensorMap omap = fast ? output_map(out, g) : xmap;
    const size_t smem = sizeof(float) * ((size_t)STAGE_WORDS + (size_t)LNBUF * LBUF + 2 * 16 * NB) + LNBUF * sizeof(PipeSync);
    auto kernel = fast ? convt3d_tf32_layernorm_gelu<true> : convt3d_tf32_layernorm_gelu<false>;
    const dim3 grid = persistent_grid(kernel, g, smem, LN_THREADS);
    kernel<<<grid, LN_THREADS, smem, stream>>>(xmap, omap, wt.data_ptr<float>(), b.data_ptr<float>(),
                                               ga.data_ptr<float>(), be.data_ptr<float>(), out.data_ptr<float>(),
                                               reinterpret_cast<const unsigned*>(wrap.data_ptr<int>()), g, (float)eps,
                                               (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kbench_convt3d_layernorm_tf32", cpp_sources=_CPP, cuda_sources=_CUDA,
                   functions=["convt3d_layernorm_gelu"], extra_cuda_cflags=["-O3"], verbose=False)


def _fast_path_ok(conv: nn.ConvTranspose3d, norm: nn.LayerNorm, x: torch.Tensor) -> bool:
    if not (x.is_cuda and x.dtype == torch.float32 and conv.weight.dtype == torch.float32 and x.dim() == 5):
        return False
    if conv.stride != (2, 2, 2) or conv.kernel_size != (4, 4, 4) or conv.padding != (1, 1, 1) \
            or conv.output_padding != (0, 0, 0) or conv.dilation != (1, 1, 1) or conv.groups != 1 or conv.bias is None:
        return False
    if norm.weight is None or norm.bias is None or tuple(norm.normalized_shape) != (2 * x.shape[4],):
        return False
    if torch.cuda.get_device_capability(x.device) < (9, 0):  # the kernel's copies are TMA (Hopper and later)
        return False
    return conv.out_channels <= 64 and x.shape[4] <= 32


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True, eps=1e-5, scaling_factor=1.0):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                                 bias=bias)
        self.layer_norm = nn.LayerNorm(out_channels, eps=eps)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        conv, norm = self.conv_transpose, self.layer_norm
        if _fast_path_ok(conv, norm, x):
            return _ext.convt3d_layernorm_gelu(x, conv.weight, conv.bias, norm.weight, norm.bias, norm.eps,
                                               float(self.scaling_factor))
        return torch.nn.functional.gelu(norm(conv(x))) * self.scaling_factor
