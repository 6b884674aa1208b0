"""cuDNN Conv3d, then one CUDA kernel fusing 2x2x2 max-pool, channel logsumexp (online) and ReLU."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = "torch::Tensor pool_lse_relu(torch::Tensor y);"

_CUDA = r"""
#include <torch/extension.h>
// c10 headers, not ATen/cuda/CUDAContext.h: that one pulls in cusparse.h/cublas headers,
// which a minimal CUDA toolkit may lack; the stream is the same one.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

// One thread per pooled voxel; consecutive threads take consecutive wo, so the
// window loads of a warp are contiguous along W for every channel.
__global__ void pool_lse_relu_kernel(const float* __restrict__ y, float* __restrict__ out,
                                     int64_t total, int C, int D, int H, int W,
                                     int Do, int Ho, int Wo) {
    const int64_t HW = (int64_t)H * W;
    const int64_t cstride = (int64_t)D * HW;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i;
        const int wo = (int)(t % Wo); t /= Wo;
        const int ho = (int)(t % Ho); t /= Ho;
        const int dd = (int)(t % Do);
        const int64_t n = t / Do;
        const float* p = y + n * C * cstride + (2 * dd) * HW + (int64_t)(2 * ho) * W + 2 * wo;

        float m = -INFINITY, s = 0.f;  // running max / sum of exp(v - m)
        for (int c = 0; c < C; ++c, p += cstride) {
            float v = fmaxf(fmaxf(fmaxf(p[0], p[1]), fmaxf(p[W], p[W + 1])),
                            fmaxf(fmaxf(p[HW], p[HW + 1]), fmaxf(p[HW + W], p[HW + W + 1])));
            if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
            else       { s += expf(v - m); }
        }
        const float r = m + logf(s);
        out[i] = r > 0.f ? r : 0.f;
    }
}

torch::Tensor pool_lse_relu(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "pool_lse_relu: input must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "pool_lse_relu: input must be float32");
    TORCH_CHECK(y.dim() == 5, "pool_lse_relu: input must be 5-D (N,C,D,H,W)");
    y = y.contiguous();
    const c10::cuda::CUDAGuard guard(y.device());
    const int64_t N = y.size(0);
    const int C = (int)y.size(1), D = (int)y.size(2), H = (int)y.size(3), W = (int)y.size(4);
    TORCH_CHECK(C > 0, "pool_lse_relu: need at least one channel");
    const int Do = D / 2, Ho = H / 2, Wo = W / 2;  // MaxPool3d(2, 2), floor mode
    auto out = torch::empty({N, 1, Do, Ho, Wo}, y.options());
    const int64_t total = N * Do * Ho * Wo;
    if (total == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
    pool_lse_relu_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), total, C, D, H, W, Do, Ho, Wo);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kbench_cuda_conv3d_logsumexp",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["pool_lse_relu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.max_pool = nn.MaxPool3d(kernel_size=2, stride=2)  # kept for parity; the kernel pools

    def forward(self, x):
        return _ext.pool_lse_relu(self.conv(x))
