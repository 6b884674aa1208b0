// conv3d_gelu's core: the cp.async pipeline of attempt 4 (docs/solutions.md). Persistent blocks walk the tiles;
// each (tile, chunk) stage is copied by cp.async into one of two buffers while the previous one is multiplied by
// mma.sync from ldmatrix. Its Geometry, swz, round_tf32 and tile_origin predate tile.cuh's (never include both):
// attempt 5's core measured slower for gelu. Taken from the shipped file with only its compile-time dead parts
// removed (the POOLS and PAIRS row modes, mma_pairs); the kd-slab stages stay, since the kernel reads g.slabs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <torch/types.h>
#include "mma_sync.cuh"

namespace {

constexpr int CK = 8;           // input channels per K chunk (the MMA's k)
constexpr int NB = 64;          // output channels per block
constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int TD = 2, TH = 4, TW = 32;  // output voxels per tile: 256, one 32-voxel run along W per warp

struct Geometry {
    int N, C, D, H, W;          // input
    int K, Do, Ho, Wo;          // output channels and sizes
    int pad;
    int chunks;                 // ceil(C / CK)
    int slabs;                  // pipeline stages per chunk: 1 (all taps) or KS (one kd plane of taps each)
    int classes;                // output parity classes of a strided transposed convolution (1: a plain convolution)
    uint32_t masks[8];          // per class: which of the KS^3 taps exist (bit (kd * KS + kh) * KS + kw)
    int tiles_d, tiles_h, tiles_w;
    long long tiles;            // per 64-channel block
    int wsz, xsz, bsz;          // shared-memory words: weights, input tile, one pipeline buffer
    int resident;               // weights loaded once per block (one chunk, one class)
};

// Shared memory holds 8 channels per position (weights: per output channel) as two 16-byte halves; the halves
// swap on every fourth position, so the eight rows an ldmatrix phase reads always fall in distinct banks.
__device__ __forceinline__ int swz(int pos, int c) { return pos * CK + ((((c >> 2) ^ (pos >> 2)) & 1) << 2) + (c & 3); }

__device__ __forceinline__ float round_tf32(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
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
__device__ __forceinline__ TileOrigin tile_origin(long long tile, const Geometry& g) {
    TileOrigin o;
    o.cls = (int)(tile % g.classes); tile /= g.classes;
    o.ow0 = (int)(tile % g.tiles_w) * TW; tile /= g.tiles_w;
    o.oh0 = (int)(tile % g.tiles_h) * TH; tile /= g.tiles_h;
    o.od0 = (int)(tile % g.tiles_d) * TD; tile /= g.tiles_d;
    o.n = (int)tile;
    return o;
}

// Weights (packed on the host as [kblock][chunk][tap][k 64][ci 8], TF32-rounded) of TAPS taps into smem.
template <int TAPS>
__device__ __forceinline__ void copy_weights(const float* __restrict__ src, float* ws) {
    constexpr int ROWS = TAPS * NB;  // (tap, k) rows of 8 channels = two 16-byte halves
    for (int v = threadIdx.x; v < ROWS * 2; v += blockDim.x) {
        const int row = v >> 1, half = v & 1;
        cp_async16(ws + swz(row, half * 4), src + row * CK + half * 4);
    }
}

// Queue the copies of one pipeline stage: a tile's input for one chunk of channels and one slab of kd (all of them
// when SLAB is false), and the slab's weights unless they are resident.
template <int KS, int TPC, bool SLAB>
__device__ __forceinline__ void issue_stage(const float* __restrict__ x, const float* __restrict__ wblock,
                                            const Geometry& g, long long tile, int chunk, int kd0, float* ws, float* xs) {
    constexpr int XD = SLAB ? TD : TD + KS - 1, XH = TH + KS - 1, XW = TW + KS - 1;
    constexpr int TAPS = SLAB ? TPC / KS : TPC;
    const TileOrigin o = tile_origin(tile, g);
    if (!g.resident) {
        const float* wchunk = wblock + ((long long)o.cls * g.chunks + chunk) * TPC * NB * CK;
        copy_weights<TAPS>(wchunk + (long long)kd0 * TAPS * NB * CK, ws);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // One warp per (channel, d, h) input row; lanes along W.
    for (int r = warp; r < CK * XD * XH; r += (int)(blockDim.x >> 5)) {
        const int c = r / (XD * XH), rd = (r / XH) % XD, rh = r % XH;
        const int ci = chunk * CK + c, id = o.od0 - g.pad + kd0 + rd, ih = o.oh0 - g.pad + rh;
        const bool row_ok = ci < g.C && id >= 0 && id < g.D && ih >= 0 && ih < g.H;
        const float* src = row_ok ? x + ((((long long)o.n * g.C + ci) * g.D + id) * g.H + ih) * g.W : x;
        const int pos0 = (rd * XH + rh) * XW;
#pragma unroll
        for (int i0 = 0; i0 < XW; i0 += 32) {
            const int i = i0 + lane;
            if (i < XW) {
                const int iw = o.ow0 - g.pad + i;
                const bool ok = row_ok && iw >= 0 && iw < g.W;
                cp_async4(xs + swz(pos0 + i, c), ok ? src + iw : x, ok ? 4 : 0);
            }
        }
    }
}

// The input tile as TF32, rounded to nearest (cp.async copies raw float32 bits; the weights come pre-rounded).
__device__ __forceinline__ void round_tile(float* xs, int words) {
    for (int i = threadIdx.x; i < words; i += blockDim.x) xs[i] = round_tf32(xs[i]);
}

// Which voxel of the tile each accumulator row is: warp w owns the W-run (td, th) = (w / TH, w % TH), and its row
// m = 16 mt + 8 half + gid (gid = lane / 4) is the W offset.
__device__ __forceinline__ int row_position(int warp, int mt, int half, int r, int XH, int XW) {
    return ((warp / TH) * XH + warp % TH) * XW + 16 * mt + 8 * half + r;
}

// One stage of the implicit GEMM: this warp's 32 voxels x 64 channels += input x weights over the stage's taps.
template <int KS, bool SLAB>
__device__ __forceinline__ void mma_stage(float (&acc)[2][8][4], const float* ws, const float* xs, uint32_t mask) {
    constexpr int XH = TH + KS - 1, XW = TW + KS - 1, KDS = SLAB ? 1 : KS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // ldmatrix row supplied by this lane: matrix q = lane / 8 covers rows 8 (q & 1) .. +7 and channels 4 (q >> 1) .. +3.
    const int q = lane >> 3, r = lane & 7;
    const int a_pos0 = row_position(warp, 0, q & 1, r, XH, XW);
    const int a_pos1 = row_position(warp, 1, q & 1, r, XH, XW);
    const int a_c = 4 * (q >> 1);
    const int b_row = r + 8 * (q >> 1), b_c = 4 * (q & 1);       // B: matrices (j, k0-3), (j, k4-7), (j+1, ..), (j+1, ..)
#pragma unroll
    for (int kd = 0; kd < KDS; ++kd)
#pragma unroll
        for (int kh = 0; kh < KS; ++kh)
#pragma unroll
            for (int kw = 0; kw < KS; ++kw) {
                const int tap = (kd * KS + kh) * KS + kw;
                if (!((mask >> tap) & 1u)) continue;  // uniform per block: a tap this class does not have
                const int shift = (kd * XH + kh) * XW + kw;
                uint32_t a[2][4];
                ldmatrix_x4(a[0], xs + swz(a_pos0 + shift, a_c));
                ldmatrix_x4(a[1], xs + swz(a_pos1 + shift, a_c));
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

// The persistent pipeline: each block walks tiles blockIdx.x, +gridDim.x, ...; stage s = (tile, chunk, slab) is
// copied into buffer s % 2 while stage s - 1 is multiplied. After a tile's last stage, epilogue(acc, origin) runs.
// KS: the input window per dimension; TPC: taps per chunk in the packed weights (KS^3).
template <int KS, int TPC, bool SLAB, typename Epilogue>
__device__ __forceinline__ void conv_pipeline(const float* __restrict__ x, const float* __restrict__ wt,
                                              const Geometry& g, Epilogue&& epilogue) {
    extern __shared__ __align__(16) float smem[];
    const float* wblock = wt + (long long)blockIdx.y * g.classes * g.chunks * TPC * NB * CK;
    auto wbuf = [&](int b) { return g.resident ? smem : smem + b * g.bsz; };
    auto xbuf = [&](int b) { return g.resident ? smem + g.wsz + b * g.xsz : smem + b * g.bsz + g.wsz; };
    if (g.resident) copy_weights<TPC>(wblock, smem);
    const int per_tile = g.chunks * g.slabs;
    const long long mine = g.tiles > blockIdx.x ? (g.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    const long long stages = mine * per_tile;
    auto issue = [&](long long s, int b) {
        const long long tile = blockIdx.x + (s / per_tile) * gridDim.x;
        const int within = (int)(s % per_tile);
        issue_stage<KS, TPC, SLAB>(x, wblock, g, tile, within / g.slabs, within % g.slabs, wbuf(b), xbuf(b));
    };
    if (stages > 0) issue(0, 0);
    cp_async_commit();

    float acc[2][8][4];
    for (long long s = 0; s < stages; ++s) {
        const int b = (int)(s & 1), within = (int)(s % per_tile);
        if (s + 1 < stages) issue(s + 1, b ^ 1);
        cp_async_commit();
        cp_async_wait_one();
        __syncthreads();
        round_tile(xbuf(b), g.xsz);
        __syncthreads();
        if (within == 0) {
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
        }
        const TileOrigin o = tile_origin(blockIdx.x + (s / per_tile) * gridDim.x, g);
        const int slab = within % g.slabs;
        mma_stage<KS, SLAB>(acc, wbuf(b), xbuf(b), g.masks[o.cls] >> (slab * KS * KS));
        if (within == per_tile - 1) epilogue(acc, o);
        __syncthreads();  // buffer b is refilled by the next iteration's copies
    }
    cp_async_wait_all();
}

// Tiles over an out_d x out_h x out_w grid (per class); a plain convolution has one class with every tap.
void set_tiles(Geometry& g, int out_d, int out_h, int out_w, int classes = 1) {
    g.tiles_d = (out_d + TD - 1) / TD;
    g.tiles_h = (out_h + TH - 1) / TH;
    g.tiles_w = (out_w + TW - 1) / TW;
    g.classes = classes;
    g.tiles = (long long)g.N * g.tiles_d * g.tiles_h * g.tiles_w * classes;
    if (classes == 1) g.masks[0] = 0xffffffffu;
}

// Shared memory of a pipeline buffer: one stage's weights (all taps, or one kd slab) and input tile.
void set_smem(Geometry& g, int KS, bool slab, bool resident) {
    g.slabs = slab ? KS : 1;
    g.resident = resident;
    g.wsz = (resident ? KS : (slab ? 1 : KS)) * KS * KS * NB * CK;
    g.xsz = CK * (slab ? TD : TD + KS - 1) * (TH + KS - 1) * (TW + KS - 1);
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
    return dim3((unsigned)blocks, (unsigned)((g.K + NB - 1) / NB));
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& w, const char* who) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), who, ": CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, who, ": float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(1) == x.size(1), who, ": shape mismatch");
    TORCH_CHECK(w.size(2) == 3 && w.size(3) == 3 && w.size(4) == 3, who, ": 3x3x3 kernels only");
    TORCH_CHECK(x.device() == w.device(), who, ": tensors on different devices");
}

}  // namespace
