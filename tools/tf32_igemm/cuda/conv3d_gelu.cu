// conv3d_gelu: Conv3d with leaky_relu, channel offset, clamp and GELU; the kernel and its host entry point (the
// Python side: templates/conv3d_gelu.py).
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cp_async_conv.cuh"

namespace {

// erf(x) for |x| <= 1/sqrt(2), GELU's argument after the clamp: its Taylor series to x^15 (error 2e-8 with float
// coefficients), about a third of the instructions of the general erff.
__device__ __forceinline__ float erf_small(float x) {
    const float t = x * x;
    float p = -1.4925650e-05f;                // 2/sqrt(pi) * (-1)^n / (n! (2n + 1)), n = 7 .. 0
    p = fmaf(p, t, 1.2055333e-04f);
    p = fmaf(p, t, -8.5483270e-04f);
    p = fmaf(p, t, 5.2239776e-03f);
    p = fmaf(p, t, -2.6866171e-02f);
    p = fmaf(p, t, 1.1283792e-01f);
    p = fmaf(p, t, -3.7612639e-01f);
    p = fmaf(p, t, 1.1283792e+00f);
    return x * p;
}

__device__ __forceinline__ float post_op(float v, float offset) {
    v = v > 0.f ? v : 0.2f * v;
    v = fminf(fmaxf(v + offset, -1.f), 1.f);
    return 0.5f * v * (1.f + erf_small(v * 0.70710678118654752440f));
}

__global__ void __launch_bounds__(THREADS, 2)
conv3d_tf32_gelu(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ bias,
                 const float* __restrict__ offset, float* __restrict__ out, const Geometry g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int m0 = warp * 32;
    const int td = m0 / (TH * TW), th = (m0 / TW) % TH;
    conv_pipeline<3, 27, false>(x, wt, g, [&](float (&acc)[2][8][4], const TileOrigin& o) {
        // Accumulator (mt, j, e): voxel 16 mt + 8 (e / 2) + gid, channel 8 j + 2 tig + (e % 2).
        const int od = o.od0 + td, oh = o.oh0 + th;
        if (od >= g.Do || oh >= g.Ho) return;
        // Two passes: the results first replace the accumulators, then all are stored. A load issued after stores
        // waits for them to leave the LSU, so no bias or offset load may follow one of this tile's stores.
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int k = min(blockIdx.y * NB + j * 8 + 2 * tig + e, g.K - 1);  // past K: computed, not stored
                const float b = __ldg(bias + k), off = __ldg(offset + k);
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int half = 0; half < 2; ++half) acc[mt][j][half * 2 + e] = post_op(acc[mt][j][half * 2 + e] + b, off);
            }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int k = blockIdx.y * NB + j * 8 + 2 * tig + e;
                if (k >= g.K) continue;
                float* dst = out + ((((long long)o.n * g.K + k) * g.Do + od) * g.Ho + oh) * g.Wo;
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const int ow = o.ow0 + mt * 16 + half * 8 + gid;
                        if (ow < g.Wo) dst[ow] = acc[mt][j][half * 2 + e];
                    }
                }
            }
        }
    });
}

}  // namespace

// x: (N, C, D, H, W); w: (K, C, 3, 3, 3), float32 CUDA. gelu(clamp(leaky_relu(conv(x) + bias) + offset)),
// stride 1, zero padding pad.
torch::Tensor conv3d_gelu_fused(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor offset, int64_t pad) {
    check_inputs(x, w, "conv3d_gelu_fused");
    TORCH_CHECK(bias.is_cuda() && offset.is_cuda() && bias.scalar_type() == torch::kFloat32 &&
                offset.scalar_type() == torch::kFloat32, "conv3d_gelu_fused: float32 CUDA bias and offset");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    Geometry g = input_geometry(x, w, pad);
    TORCH_CHECK(g.Do > 0 && g.Ho > 0 && g.Wo > 0, "conv3d_gelu_fused: kernel larger than padded input");
    TORCH_CHECK(bias.numel() == g.K && offset.numel() == g.K, "conv3d_gelu_fused: bias/offset must have K values");
    auto out = torch::empty({g.N, g.K, g.Do, g.Ho, g.Wo}, x.options());
    if (out.numel() == 0) return out;
    auto wt = pack_weights(w, g, 3);
    auto b = bias.contiguous(), o = offset.contiguous();
    set_tiles(g, g.Do, g.Ho, g.Wo);
    set_smem(g, 3, false, g.chunks == 1);  // one chunk: the weights stay in shared memory
    const size_t smem = smem_bytes(g);
    const dim3 grid = persistent_grid(conv3d_tf32_gelu, g, smem);
    conv3d_tf32_gelu<<<grid, THREADS, smem, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), wt.data_ptr<float>(), b.data_ptr<float>(), o.data_ptr<float>(), out.data_ptr<float>(), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
