"""cuDNN ConvTranspose3d, then one CUDA kernel (thread per voxel) fusing channel softmax and sigmoid."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = "torch::Tensor softmax_sigmoid(torch::Tensor y);"

_CUDA = r"""
#include <torch/extension.h>
// c10 headers, not ATen/cuda/CUDAContext.h: that one pulls in cusparse.h/cublas headers,
// which a minimal CUDA toolkit may lack; the stream is the same one.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

// One thread per (n, spatial) voxel; channels are S apart, so consecutive threads
// touch consecutive addresses for every channel. Pass 1: online max and sum of
// exp; pass 2: write. expf (not __expf): the tolerance is 1e-4.
__global__ void softmax_sigmoid_kernel(const float* __restrict__ y, float* __restrict__ out,
                                       int64_t total, int C, int64_t S) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t base = (i / S) * C * S + i % S;
        const float* p = y + base;
        float m = -INFINITY, s = 0.f;
        for (int c = 0; c < C; ++c) {
            const float v = p[c * S];
            if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
            else       { s += expf(v - m); }
        }
        const float inv = 1.f / s;
        float* q = out + base;
        for (int c = 0; c < C; ++c) {
            const float sm = expf(p[c * S] - m) * inv;
            q[c * S] = 1.f / (1.f + expf(-sm));
        }
    }
}

torch::Tensor softmax_sigmoid(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "softmax_sigmoid: input must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "softmax_sigmoid: input must be float32");
    TORCH_CHECK(y.dim() == 5, "softmax_sigmoid: input must be 5-D (N,C,D,H,W)");
    y = y.contiguous();
    const c10::cuda::CUDAGuard guard(y.device());
    auto out = torch::empty(y.sizes(), y.options());
    const int C = (int)y.size(1);
    const int64_t S = y.size(2) * y.size(3) * y.size(4);
    const int64_t total = y.size(0) * S;
    if (total == 0 || C == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
    softmax_sigmoid_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), total, C, S);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kbench_cuda_convtranspose3d_softmax",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["softmax_sigmoid"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias=True):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            output_padding=output_padding,
            bias=bias,
        )
        self.softmax = nn.Softmax(dim=1)  # kept for parity with Model; the kernel does both
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        return _ext.softmax_sigmoid(self.conv_transpose(x))
