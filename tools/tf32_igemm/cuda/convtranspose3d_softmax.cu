// convtranspose3d_softmax: the stride-2 ConvTranspose3d with channel softmax and sigmoid; the kernel and its host entry point (the Python side: templates/convtranspose3d_softmax.py).
#include <algorithm>
#include <climits>
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

// Stride-2 transposed convolution as 8 parity classes: output o = 2 j + p (per dimension) receives input i = j + s + dmin
// through kernel tap k = p + pad - 2 (s + dmin), for the slots s where that k exists. Each class is a plain
// 2x2x2-slot convolution over the input with the other slots masked off. A block takes one (d, h) parity pair
// (pair = 2 pd + ph) and both W-parities (warps 0-7 W-parity 0, warps 8-15 W-parity 1, each with its own slots), so
// it writes whole W rows: both halves of every 32-byte sector of its stride-2 stores leave the block together.
constexpr int SLOTS = 2;
constexpr int SM_THREADS = 512;
// Input window per stage (tma.cuh's staging): [channel 8][d TD + 1][h TH + 1][w 40], w 33 used after a shift of up
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
