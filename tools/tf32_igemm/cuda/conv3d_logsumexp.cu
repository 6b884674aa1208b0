// conv3d_logsumexp: Conv3d with max-pool, channel logsumexp and ReLU; the kernel and its host entry point (the Python side: templates/conv3d_logsumexp.py).
#include <algorithm>
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "persistent_grid.cuh"
#include "scan_wrap.cuh"
#include "tile.cuh"
#include "tma.cuh"
#include "tma_maps.cuh"
#include "wgmma.cuh"

namespace {

// ---- conv3d_logsumexp: Conv3d (3x3x3, stride 1) -> MaxPool3d(2, 2) -> logsumexp over channels -> ReLU ------------
// A tile is TD x LSE_TH x TW = 2 x 8 x 32 convolution outputs (1 x 4 x 16 pooled voxels) x 64 channels, 16 warps.
// Warp w = 4 hp + wb owns d 0-1 x h 2hp..2hp+1 x w 8wb..8wb+7: accumulator row m = 16 mt + 8 half + gid is voxel
// (mt, 2 hp + half, 8 wb + gid), so a thread holds the 2 x 2 (d, h) column of a pool window and lane ^ 4 the other w.
// The MMAs are wgmma (wgmma.cuh): per tap, each warpgroup (warps 4 hp .. 4 hp + 3) issues one m64n64k8 per mt, its A
// from registers, its B (the tap's weights) read by the tensor cores from shared memory; the next tap's A fragments
// are loaded while they run.
// A stage is one kd plane of taps (a slab: 9 taps, 18 KB of weights) of one 8-channel chunk, with its input window
// [channel 8][d 2][h 11][w 44] (31 KB): 2 planes, 10 rows and 37 widths are used (window_shift: 3 at padding 1); the
// 11th row makes a channel plane 968 words, and 968 % 32 == 8 keeps the A loads conflict-free (any 4-plane window, or
// 2 planes of 10 rows, gives 0 or 16). Four such stages (49 KB each) are in flight.
constexpr int LSE_THREADS = 512;
constexpr int LSE_TH = 8;
constexpr int LSE_TAPS = 9;
constexpr int LSE_WWORDS = LSE_TAPS * WG_BWORDS;
constexpr int SXBW = 44, SXBH = LSE_TH + 3, SXBD = TD;
constexpr int SXPLANE = SXBW * SXBH * SXBD;
constexpr int SXWORDS = CK * SXPLANE;
constexpr int SBUF = (LSE_WWORDS + SXWORDS + 31) / 32 * 32;
constexpr int SNBUF = 4;
static_assert(SXPLANE % 32 == 8 || SXPLANE % 32 == 24, "A loads must not conflict");
static_assert(SXBW >= TW + 2 + 3 && SXBW % 4 == 0 && SXBH >= LSE_TH + 2, "input window");

__global__ void pack_slabs(const float* __restrict__ w, float* __restrict__ out, int C, int K, long long total) {
    // out: [chunk][kd][kh][kw][B operand: wg_b_index(ci % 8, k)] from w (K, C, 3, 3, 3); TF32-rounded, zero-padded,
    // so a stage's 9 taps are one contiguous bulk copy. i runs over (chunk, tap, k, ci % 8).
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int k8 = (int)(i % CK), n = (int)(i / CK % NB);
        const long long t = i / (CK * NB);  // chunk * 27 + tap
        const int tap = (int)(t % 27), ci = (int)(t / 27) * CK + k8;
        float v = 0.f;
        if (ci < C && n < K) v = round_tf32(w[((long long)n * C + ci) * 27 + tap]);
        out[t * WG_BWORDS + wg_b_index(k8, n)] = v;
    }
}

// One slab: this warp's 32 voxels x 64 channels += the stage's 8 channels x its 9 taps (kh, kw), two wgmmas per tap
// (one per 16-row half of the warp's voxels), the next tap's A loaded while they run. xa: this thread's A element
// (channel tig, voxel (0, 2 hp, 8 wb + gid)) at tap (0, 0); wbase: the stage's B (tap 0).
template <bool EXACT>
__device__ __forceinline__ void slab_taps(float (&acc)[2][8][4], const float* wbase, const float* xa) {
    constexpr int PL = SXBH * SXBW;  // one d plane of a channel's window
    uint32_t a[2][2][4];
    auto load = [&](uint32_t (&f)[2][4], int tap) {
        const float* p = xa + (tap / 3) * SXBW + tap % 3;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            f[mt][0] = tf32_a<EXACT>(p[mt * PL]);
            f[mt][1] = tf32_a<EXACT>(p[mt * PL + SXBW]);
            f[mt][2] = tf32_a<EXACT>(p[4 * SXPLANE + mt * PL]);
            f[mt][3] = tf32_a<EXACT>(p[4 * SXPLANE + mt * PL + SXBW]);
        }
    };
    const uint64_t d0 = b_desc(wbase);
    load(a[0], 0);
#pragma unroll
    for (int tap = 0; tap < LSE_TAPS; ++tap) {
        wg_fence();
        const uint64_t desc = d0 + ((uint64_t)(tap * WG_BWORDS * sizeof(float)) >> 4);
        wgmma_tf32(acc[0], a[tap & 1][0], desc);
        wgmma_tf32(acc[1], a[tap & 1][1], desc);
        wg_commit();
        if (tap + 1 < LSE_TAPS) {
            wg_wait<1>();  // the previous tap's wgmmas are done: their A registers take the next tap's
            load(a[(tap + 1) & 1], tap + 1);
        }
    }
    wg_wait<0>();  // the stage's shared memory is read; acc holds the results
    fence_acc(acc[0]);
    fence_acc(acc[1]);
}

// max that returns NaN if either operand is NaN (MaxPool3d's rule; fmaxf would drop it).
__device__ __forceinline__ float max_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__global__ void __launch_bounds__(LSE_THREADS, 1)
conv3d_tf32_pool_lse(const __grid_constant__ CUtensorMap xmap, const float* __restrict__ wt,
                     const float* __restrict__ bias, float* __restrict__ out, const unsigned* __restrict__ wrap,
                     const Geometry g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(1024) float smem_base[];
    float* const bufs = smem_base;
    PipeSync* const sync = reinterpret_cast<PipeSync*>(bufs + SNBUF * SBUF);  // per buffer: landed, warps done
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3, hp = warp >> 2, wb = warp & 3;
    if (threadIdx.x == 0) pipe_init<SNBUF>(sync);
    __syncthreads();
    const int a_off = LSE_WWORDS + tig * SXPLANE + 2 * hp * SXBW + 8 * wb + gid + window_shift(g);
    const bool exact = *wrap != 0u;  // x holds a NaN the fast TF32 rounding would lose (tf32_a)
    const int Dp = g.Do / 2, Hp = g.Ho / 2, Wp = g.Wo / 2;
    tma_pipeline<SNBUF, SXWORDS, SBUF, 3, LSE_WWORDS, LSE_TH>(&xmap, wt, g, bufs, sync,
        [&](float (&acc)[2][8][4], const float* buf, const TileOrigin&, int) {
            if (exact) slab_taps<true>(acc, buf, buf + a_off);
            else slab_taps<false>(acc, buf, buf + a_off);
        }, [&](float (&acc)[2][8][4], const TileOrigin& o) {
        // Accumulator (mt, j, half * 2 + e): voxel (mt, 2 hp + half, 8 wb + gid), channel 8 j + 2 tig + e. The pool
        // is this thread's four (d, h) values and lane ^ 4's; then an online logsumexp over the thread's 16 channels
        // and two shuffle steps over the four threads (tig) that hold a voxel's 64.
        float mx = -INFINITY, sum = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float v = max_nan(max_nan(acc[0][j][e], acc[0][j][2 + e]), max_nan(acc[1][j][e], acc[1][j][2 + e]));
                v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, 4));
                const int k = j * 8 + 2 * tig + e;
                if (k < g.K) {
                    v += __ldg(bias + k);  // max(conv) + bias: the bias is the same over the window
                    if (v > mx) { sum = sum * expf(mx - v) + 1.f; mx = v; }
                    else { sum += v == mx ? 1.f : expf(v - mx); }  // v == mx: equal infinities count once each
                }
            }
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
            const float osum = __shfl_xor_sync(0xffffffffu, sum, off);
            const float nmx = fmaxf(mx, omx);  // a NaN max carries its NaN sum, which propagates below
            sum = (mx == nmx ? sum : sum * expf(mx - nmx)) + (omx == nmx ? osum : osum * expf(omx - nmx));
            mx = nmx;
        }
        const int pd = o.od0 / 2, ph = o.oh0 / 2 + hp, pw = o.ow0 / 2 + 4 * wb + (gid >> 1);
        if (tig == 0 && (gid & 1) == 0 && pd < Dp && ph < Hp && pw < Wp) {
            const float r = mx + logf(sum);
            out[(((long long)o.n * Dp + pd) * Hp + ph) * Wp + pw] = r < 0.f ? 0.f : r;  // ReLU that keeps NaN
        }
    });
#endif
}

// Argument checks and output sizes of a stride-1 3x3x3 Conv3d.
Geometry input_geometry(const torch::Tensor& x, const torch::Tensor& w, int64_t pad) {
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    g.K = (int)w.size(0); g.pad = (int)pad;
    const int KS = (int)w.size(2);
    g.Do = g.D + 2 * g.pad - KS + 1; g.Ho = g.H + 2 * g.pad - KS + 1; g.Wo = g.W + 2 * g.pad - KS + 1;
    g.chunks = (g.C + CK - 1) / CK;
    return g;
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& w, const char* who) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), who, ": CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, who, ": float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(1) == x.size(1), who, ": shape mismatch");
    TORCH_CHECK(w.size(2) == 3 && w.size(3) == 3 && w.size(4) == 3, who, ": 3x3x3 kernels only");
    TORCH_CHECK(x.device() == w.device(), who, ": tensors on different devices");
}

}  // namespace

// x: (N, C, D, H, W); w: (K <= 64, C, 3, 3, 3), float32 CUDA. relu(logsumexp_c(maxpool2(conv(x) + bias))),
// stride 1, zero padding pad.
torch::Tensor conv3d_pool_lse_relu(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad) {
    check_inputs(x, w, "conv3d_pool_lse_relu");
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32, "conv3d_pool_lse_relu: float32 CUDA bias");
    TORCH_CHECK(w.size(0) <= NB, "conv3d_pool_lse_relu: at most 64 output channels");
    TORCH_CHECK(pad >= 0, "conv3d_pool_lse_relu: negative padding");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    Geometry g = input_geometry(x, w, pad);
    TORCH_CHECK(g.Do > 0 && g.Ho > 0 && g.Wo > 0, "conv3d_pool_lse_relu: kernel larger than padded input");
    TORCH_CHECK(bias.numel() == g.K, "conv3d_pool_lse_relu: bias must have K values");
    const int Dp = g.Do / 2, Hp = g.Ho / 2, Wp = g.Wo / 2;
    auto out = torch::empty({g.N, 1, Dp, Hp, Wp}, x.options());
    if (out.numel() == 0) return out;
    auto wc = w.contiguous(), b = bias.contiguous();
    const long long total = (long long)g.chunks * 27 * NB * CK;
    auto wt = torch::empty({total}, w.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    pack_slabs<<<(unsigned)std::min<long long>((total + 255) / 256, 4096), 256, 0, stream>>>(
        wc.data_ptr<float>(), wt.data_ptr<float>(), g.C, g.K, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    set_tiles<LSE_TH>(g, 2 * Dp, 2 * Hp, 2 * Wp);  // only whole pool windows
    torch::Tensor x_keep;  // the padded copy of x, if input_map makes one
    const CUtensorMap xmap = input_map(x, g, {SXBW, SXBH, SXBD, CK, 1}, x_keep);
    const torch::Tensor wrap = wrap_flag(x);
    const size_t smem = sizeof(float) * (size_t)SNBUF * SBUF + SNBUF * sizeof(PipeSync);
    const dim3 grid = persistent_grid(conv3d_tf32_pool_lse, g, smem, LSE_THREADS);
    conv3d_tf32_pool_lse<<<grid, LSE_THREADS, smem, stream>>>(
        xmap, wt.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
        reinterpret_cast<const unsigned*>(wrap.data_ptr<int>()), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
