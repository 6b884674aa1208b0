// convtranspose3d_layernorm: the stride-2 ConvTranspose3d (kernel 4) with LayerNorm over W, GELU and scaling; the kernel and its host entry point (the Python side: templates/convtranspose3d_layernorm.py).
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "fast_math.cuh"
#include "persistent_grid.cuh"
#include "scan_wrap.cuh"
#include "tile.cuh"
#include "tma.cuh"
#include "tma_maps.cuh"
#include "tma_store.cuh"
#include "tma_taps.cuh"

namespace {

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

// 1 / x in one MUFU instruction (relative error about 2^-23).
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
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
    extern __shared__ __align__(1024) float smem_base[];  // 1024-aligned base: see convtranspose3d_softmax.cu
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
