"""cuDNN Conv3d, then one float4-vectorized CUDA kernel fusing leaky_relu, channel offset, clamp and erf GELU."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = "torch::Tensor leaky_add_clamp_gelu(torch::Tensor y, torch::Tensor sum_tensor);"

_CUDA = r"""
#include <torch/extension.h>
// c10 headers, not ATen/cuda/CUDAContext.h: that one pulls in cusparse.h/cublas headers,
// which a minimal CUDA toolkit may lack; the stream is the same one.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float fused_op(float v, float b) {
    v = v > 0.f ? v : 0.2f * v;
    v = fminf(fmaxf(v + b, -1.f), 1.f);
    return 0.5f * v * (1.f + erff(v * 0.70710678118654752440f));
}

// Used when D*H*W % 4 == 0: the 4 lanes of a float4 then share one channel.
__global__ void fused_vec4_kernel(const float4* __restrict__ y, const float* __restrict__ bias,
                                  float4* __restrict__ out, int64_t n4, int64_t S4, int C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float b = __ldg(bias + (i / S4) % C);
        float4 v = y[i];
        v.x = fused_op(v.x, b); v.y = fused_op(v.y, b);
        v.z = fused_op(v.z, b); v.w = fused_op(v.w, b);
        out[i] = v;
    }
}

__global__ void fused_scalar_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                    float* __restrict__ out, int64_t n, int64_t S, int C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = fused_op(y[i], __ldg(bias + (i / S) % C));
    }
}

torch::Tensor leaky_add_clamp_gelu(torch::Tensor y, torch::Tensor sum_tensor) {
    TORCH_CHECK(y.is_cuda() && sum_tensor.is_cuda(), "leaky_add_clamp_gelu: inputs must be CUDA tensors");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && sum_tensor.scalar_type() == torch::kFloat32,
                "leaky_add_clamp_gelu: inputs must be float32");
    TORCH_CHECK(y.dim() == 5, "leaky_add_clamp_gelu: input must be 5-D (N,C,D,H,W)");
    TORCH_CHECK(y.device() == sum_tensor.device(), "leaky_add_clamp_gelu: inputs on different devices");
    const int C = (int)y.size(1);
    // Only a per-channel offset (C,1,1,1) broadcasts over dim 1 the way the kernel assumes.
    TORCH_CHECK(sum_tensor.dim() == 4 && sum_tensor.size(0) == C && sum_tensor.size(1) == 1 &&
                sum_tensor.size(2) == 1 && sum_tensor.size(3) == 1,
                "leaky_add_clamp_gelu: sum_tensor must have shape (C,1,1,1)");
    y = y.contiguous();
    auto bias = sum_tensor.contiguous();
    const c10::cuda::CUDAGuard guard(y.device());
    auto out = torch::empty(y.sizes(), y.options());
    const int64_t n = y.numel();
    if (n == 0) return out;
    const int64_t S = y.size(2) * y.size(3) * y.size(4);
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    const bool aligned = (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) % 16 == 0);
    if (S % 4 == 0 && aligned) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, 65535);
        fused_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(y.data_ptr<float>()), bias.data_ptr<float>(),
            reinterpret_cast<float4*>(out.data_ptr<float>()), n4, S / 4, C);
    } else {
        const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
        fused_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, S, C);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kbench_cuda_conv3d_gelu",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["leaky_add_clamp_gelu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        return _ext.leaky_add_clamp_gelu(self.conv(x), self.sum_tensor)
