"""Stride-2 ConvTranspose3d on TF32 tensor cores as eight parity-class convolutions, with softmax and sigmoid fused.

Output voxel o = 2j + p (per dimension, parity p) only receives the kernel taps k with k = p + padding - 2 delta, from
input j + delta. So the transposed convolution splits into 8 classes (pd, ph, pw), each a plain convolution over the
input with 2 x 2 x 2 slots, some of them empty (1, 2, 4 or 8 taps per class at kernel 3): the zeros a transposed
convolution would multiply are never touched. Each tile of 2 x 4 x 32 class voxels x all 64 output channels is
accumulated in registers (mma.sync m16n8k8, TF32 inputs rounded to nearest, float32 accumulation); the 64 channels of
a voxel sit in the four threads of a quad, so the channel softmax is two shuffles for the max and two for the sum,
followed by the sigmoid and one store per value. A block of 16 warps takes one (d, h) parity pair and both W-parities
of its rows (warps 0-7 and 8-15, each half with its own taps), so the two halves of every sector of the stride-2
stores leave one block together. Persistent blocks (one per SM; an odd count, so each cycles through pairs of unequal
work) walk the tiles. Copies are TMA (Hopper): one thread starts each stage's two copies (the weights, packed per
class by one small kernel per call in shared-memory order, as one bulk copy; the input window as one 5-D tensor copy,
zero-filled outside the input), three stages in flight on mbarriers; the last warp done with a stage starts the copy
into its buffer, so no block-wide barrier runs per stage. Results leave the same way: each pair of warps writes its 64
channels x 32 voxels into shared memory in TMA's 128-byte swizzle and one thread stores them with one tensor copy,
which also clips the output's edges (64 channels and an output width divisible by 4; otherwise one guarded store per
value). The kernel needs sm_90 or later; older GPUs take the fallback.

Stride 2 with two slots per dimension (kernel 3, at any padding and output padding) and up to 64 output channels take
the fast path at any input size; anything else falls back to cuDNN plus the same ops. TF32 is the precision PyTorch's
defaults allow cuDNN for convolutions (docs/solutions.md has the error figures).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = "torch::Tensor convt3d_softmax_sigmoid(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad, int64_t out_pad);"

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
// Stride-2 transposed convolution as 8 parity classes: output o = 2 j + p (per dimension) receives input i = j + s + dmin
// through kernel tap k = p + pad - 2 (s + dmin), for the slots s where that k exists. Each class is a plain
// 2x2x2-slot convolution over the input with the other slots masked off. A block takes one (d, h) parity pair
// (pair = 2 pd + ph) and both W-parities (warps 0-7 W-parity 0, warps 8-15 W-parity 1, each with its own slots), so
// it writes whole W rows: both halves of every 32-byte sector of its stride-2 stores leave the block together.
constexpr int SLOTS = 2;
constexpr int SM_THREADS = 512;
// Input window per stage (core's TMA staging): [channel 8][d TD + 1][h TH + 1][w 40], w 33 used after a shift of up
// to 3 (window_shift); 40 keeps rows 16-byte multiples and makes a channel plane 600 words (600 % 32 == 24).
constexpr int XBW = 40, XBH = TH + 1, XBD = TD + 1;
constexpr int XPLANE = XBW * XBH * XBD;
constexpr int XWORDS = CK * XPLANE;
constexpr int BUF_WORDS = (TMA_WWORDS + XWORDS + 31) / 32 * 32;
constexpr int NBUF = 3;  // stages in flight: two copies run during a stage's MMAs
static_assert(XPLANE % 32 == 8 || XPLANE % 32 == 24, "A loads must not conflict");
static_assert(XBW >= TW + SLOTS - 1 + 3 && (XBW * 4) % 16 == 0, "input window rows");

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

// FAST: 64 output channels and an output row pitch of 16-byte multiples: results leave through shared memory by TMA
// stores (omap). Otherwise one guarded store per value (omap unused).
template <bool FAST>
__global__ void __launch_bounds__(SM_THREADS, 1)
convt3d_tf32_softmax_sigmoid(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap omap,
                             const float* __restrict__ wt, const float* __restrict__ bias, float* __restrict__ out,
                             const unsigned* __restrict__ wrap, const Geometry g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The dynamic shared memory base is 1024-byte aligned (as TMA with 128-byte swizzling requires of it); taking it
    // as is keeps the compiler's knowledge that these are shared addresses (LDS, not generic loads).
    extern __shared__ __align__(1024) float smem_base[];
    float* const staging = smem_base;
    float* const smem = smem_base + STAGE_WORDS;  // the pipeline buffers
    float* const bias_s = smem + NBUF * BUF_WORDS;  // [tig][2 j + e] = bias(8 j + 2 tig + e) * log2(e); -inf past K
    PipeSync* const sync = reinterpret_cast<PipeSync*>(bias_s + NB);  // per buffer: landed, warps done
    constexpr float LOG2E = 1.4426950408889634f;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int pw = warp >> 3, run = warp & 7, td = run / TH, th = run % TH;
    if (tid < NB) {
        const int t = tid >> 4, i = tid & 15, k = 8 * (i >> 1) + 2 * t + (i & 1);
        bias_s[tid] = k < g.K ? bias[k] * LOG2E : -INFINITY;
    }
    if (tid == 0) pipe_init<NBUF>(sync);
    __syncthreads();

    // This thread's fixed offsets into a buffer (see stage_taps).
    const int a_off = TMA_WWORDS + tig * XPLANE + (td * XBH + th) * XBW + gid + window_shift(g);
    const int b_off = b_offset(lane, pw);
    const long long cstride = (long long)g.Do * g.Ho * g.Wo;  // between output channels; K cstride < 2^31 (host)
    const StagingSlots st(staging, run, gid, tig, pw);
    const bool exact = *wrap != 0u;  // x holds a NaN the fast TF32 rounding would lose (tf32_a)
    tma_pipeline<NBUF, XWORDS, BUF_WORDS>(&xmap, wt, g, smem, sync, [&](float (&acc)[2][8][4], const float* buf, const TileOrigin& o, int) {
        uint32_t mask = 0;  // g.masks[o.cls] without a runtime index into the parameters
#pragma unroll
        for (int c = 0; c < 4; ++c) mask = c == o.cls ? g.masks[c] : mask;
        mask = (mask >> (8 * pw)) & 0xffu;
        stage_mma<XBW, XBH, XPLANE>(acc, buf + b_off, buf + a_off, mask, exact);
    }, [&](float (&acc)[2][8][4], const TileOrigin& o) {
        // Accumulator (mt, j, half * 2 + e): voxel w = 16 mt + 8 half + gid of this warp's run, channel 8 j + 2 tig + e.
        // The 64 channels of a voxel sit in the four threads tig = 0..3 of a quad: softmax = two shuffles each way.
        // Two passes: the results first replace the accumulators, then all 64 leave (no load after a store).
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
            store_tile(acc, st, &omap, pw == 0 && lane == 0, run, 2 * o.ow0, oh, od, o.n);
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
    });
    if (FAST && pw == 0 && lane == 0) store_wait_all();  // shared memory stays until the last stores have read it
#endif
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
    torch::Tensor x_keep;  // the padded copy of x, if input_map makes one
    const CUtensorMap xmap = input_map(x, g, {XBW, XBH, XBD, CK, 1}, x_keep);
    const torch::Tensor wrap = wrap_flag(x);
    const bool fast = g.K == NB && g.Wo % 4 == 0;  // out comes from torch::empty: 256-byte aligned
    const CUtensorMap omap = fast ? output_map(out, g) : xmap;
    const size_t smem = sizeof(float) * ((size_t)STAGE_WORDS + (size_t)NBUF * BUF_WORDS + NB) + NBUF * sizeof(PipeSync);
    auto kernel = fast ? convt3d_tf32_softmax_sigmoid<true> : convt3d_tf32_softmax_sigmoid<false>;
    dim3 grid = persistent_grid(kernel, g, smem, SM_THREADS);
    // Pairs differ in work (2 to 16 taps): an odd grid makes each block cycle through all of them.
    if (grid.x % 2 == 0 && grid.x > 1 && (long long)grid.x < g.tiles) grid.x -= 1;
    kernel<<<grid, SM_THREADS, smem, stream>>>(xmap, omap, wt.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                                               reinterpret_cast<const unsigned*>(wrap.data_ptr<int>()), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kbench_convt3d_softmax_tf32", cpp_sources=_CPP, cuda_sources=_CUDA,
                   functions=["convt3d_softmax_sigmoid"], extra_cuda_cflags=["-O3"], verbose=False)


def _two_slots(kernel: int, padding: int) -> bool:
    deltas = [(p + padding - k) // 2 for p in (0, 1) for k in range(kernel) if (p + padding - k) % 2 == 0]
    return max(deltas) - min(deltas) + 1 == 2


def _fast_path_ok(conv: nn.ConvTranspose3d, x: torch.Tensor) -> bool:
    if not (x.is_cuda and x.dtype == torch.float32 and conv.weight.dtype == torch.float32 and x.dim() == 5):
        return False
    if conv.stride != (2, 2, 2) or conv.dilation != (1, 1, 1) or conv.groups != 1 or conv.bias is None:
        return False
    if len(set(conv.kernel_size)) != 1 or len(set(conv.padding)) != 1 or len(set(conv.output_padding)) != 1:
        return False
    if torch.cuda.get_device_capability(x.device) < (9, 0):  # the kernel's copies are TMA (Hopper and later)
        return False
    k, p, op = conv.kernel_size[0], conv.padding[0], conv.output_padding[0]
    out_voxels = 1
    for n in x.shape[2:]:
        out_voxels *= (n - 1) * 2 - 2 * p + k + op
    # 32-bit offsets within a sample's output
    return conv.out_channels <= 64 and conv.out_channels * out_voxels < 2**31 and _two_slots(k, p)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias=True):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding, bias=bias)
        self.softmax = nn.Softmax(dim=1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        conv = self.conv_transpose
        if _fast_path_ok(conv, x):
            return _ext.convt3d_softmax_sigmoid(x, conv.weight, conv.bias, conv.padding[0], conv.output_padding[0])
        return self.sigmoid(self.softmax(conv(x)))
