"""Implicit-GEMM Conv3d on TF32 tensor cores with leaky_relu, channel offset, clamp and GELU in its epilogue.

The convolution output is never written to memory: each tile of 256 output voxels x 64 output channels is
accumulated in registers (mma.sync m16n8k8, TF32 inputs rounded to nearest, float32 accumulation), and the
post-ops are applied before the one store of each final value. Persistent blocks (two per SM) walk the tiles;
the weights of a 64-channel block stay in shared memory when all input channels fit one 8-channel chunk, and the
input tile of the next (tile, chunk) stage is copied with cp.async while the current one is multiplied. Shared
memory is channels-last with swizzled 16-byte halves, so ldmatrix feeds the MMAs without bank conflicts.

3x3x3 kernels with stride 1, no dilation, one group and zero padding (nn.Conv3d(in, out, 3)) take the fast path at
any input size and channel count; other convolutions fall back to cuDNN plus the same post-ops in PyTorch.
TF32 is the precision PyTorch's defaults allow cuDNN for convolutions; the error stays far inside the problem's
tolerance (docs/solutions.md has the figures).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = "torch::Tensor conv3d_gelu_fused(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor offset, int64_t pad);"

_CUDA = r"""
@CUDA@"""

_ext = load_inline(name="kbench_conv3d_gelu_tf32", cpp_sources=_CPP, cuda_sources=_CUDA, functions=["conv3d_gelu_fused"],
                   extra_cuda_cflags=["-O3"], verbose=False)

def _fast_path_ok(conv: nn.Conv3d, x: torch.Tensor) -> bool:
    if not (x.is_cuda and x.dtype == torch.float32 and conv.weight.dtype == torch.float32 and x.dim() == 5):
        return False
    if conv.stride != (1, 1, 1) or conv.dilation != (1, 1, 1) or conv.groups != 1 or conv.bias is None:
        return False
    if isinstance(conv.padding, str) or len(set(conv.padding)) != 1 or conv.padding_mode != "zeros":
        return False
    return conv.kernel_size == (3, 3, 3)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        per_channel = self.sum_tensor.dim() == 4 and self.sum_tensor.shape[1:] == (1, 1, 1) \
            and self.sum_tensor.shape[0] == self.conv.out_channels
        if per_channel and _fast_path_ok(self.conv, x):
            return _ext.conv3d_gelu_fused(x, self.conv.weight, self.conv.bias, self.sum_tensor.reshape(-1),
                                          self.conv.padding[0])
        y = F.leaky_relu(self.conv(x), negative_slope=0.2) + self.sum_tensor
        return F.gelu(torch.clamp(y, min=-1.0, max=1.0))
