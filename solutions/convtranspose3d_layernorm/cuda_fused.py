"""cuDNN ConvTranspose3d, then one warp-per-row CUDA kernel fusing last-axis LayerNorm, erf GELU and scaling."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = ("torch::Tensor layernorm_gelu_scale(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, "
        "double eps, double scale);")

_CUDA = r"""
#include <torch/extension.h>
// c10 headers, not ATen/cuda/CUDAContext.h: that one pulls in cusparse.h/cublas headers,
// which a minimal CUDA toolkit may lack; the stream is the same one.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

constexpr int K = 2;  // row elements cached in registers per lane (L <= 64 never re-reads)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.f + erff(v * 0.70710678118654752440f));
}

// One warp per row of length L (the last axis). The row loop bound depends only on
// the warp index, so all 32 lanes always reach the shuffles together.
__global__ void ln_gelu_kernel(const float* __restrict__ y, const float* __restrict__ gamma,
                               const float* __restrict__ beta, float* __restrict__ out,
                               int64_t rows, int L, float eps, float scale) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; row < rows; row += warps) {
        const float* yr = y + row * L;
        float* orow = out + row * L;
        float v[K];
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int j = lane + 32 * k;
            v[k] = j < L ? yr[j] : 0.f;
            sum += v[k];
        }
        for (int j = lane + 32 * K; j < L; j += 32) sum += yr[j];  // rows longer than 32*K
        const float mean = warp_sum(sum) / L;

        // Second pass over (x - mean) avoids the cancellation of E[x^2] - mean^2.
        float sq = 0.f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const float d = v[k] - mean;
            if (lane + 32 * k < L) sq += d * d;
        }
        for (int j = lane + 32 * K; j < L; j += 32) { const float d = yr[j] - mean; sq += d * d; }
        const float rstd = rsqrtf(warp_sum(sq) / L + eps);  // biased variance, as LayerNorm

#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int j = lane + 32 * k;
            if (j < L) orow[j] = gelu((v[k] - mean) * rstd * gamma[j] + beta[j]) * scale;
        }
        for (int j = lane + 32 * K; j < L; j += 32)
            orow[j] = gelu((yr[j] - mean) * rstd * gamma[j] + beta[j]) * scale;
    }
}

torch::Tensor layernorm_gelu_scale(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta,
                                   double eps, double scale) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "layernorm_gelu_scale: inputs must be CUDA tensors");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "layernorm_gelu_scale: inputs must be float32");
    TORCH_CHECK(y.device() == gamma.device() && y.device() == beta.device(),
                "layernorm_gelu_scale: inputs on different devices");
    TORCH_CHECK(y.dim() == 5, "layernorm_gelu_scale: input must be 5-D");
    const int64_t L = y.size(4);
    TORCH_CHECK(L > 0 && L <= INT_MAX, "layernorm_gelu_scale: bad row length");
    TORCH_CHECK(gamma.dim() == 1 && gamma.size(0) == L && beta.dim() == 1 && beta.size(0) == L,
                "layernorm_gelu_scale: weight/bias must have shape (W,) matching the last axis");
    y = y.contiguous();
    gamma = gamma.contiguous();
    beta = beta.contiguous();
    const c10::cuda::CUDAGuard guard(y.device());
    auto out = torch::empty(y.sizes(), y.options());
    const int64_t rows = y.numel() / L;
    if (rows == 0) return out;
    const int threads = 256;  // 8 rows per block per sweep
    const int64_t blocks = std::min<int64_t>((rows + 7) / 8, 65535);
    ln_gelu_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), out.data_ptr<float>(),
        rows, (int)L, (float)eps, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kbench_cuda_convtranspose3d_layernorm",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["layernorm_gelu_scale"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True, eps=1e-5, scaling_factor=1.0):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.layer_norm = nn.LayerNorm(out_channels, eps=eps)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = self.conv_transpose(x)
        ln = self.layer_norm
        return _ext.layernorm_gelu_scale(y, ln.weight, ln.bias, ln.eps, self.scaling_factor)
