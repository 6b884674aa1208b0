"""cuDNN Conv3d, then one Triton kernel fusing leaky_relu, the per-channel offset, clamp and erf GELU.

The readable Triton example: the convolution stays in cuDNN (as cuda_fused does), and the four element-wise ops
after it read and write the convolution's output once instead of four times.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

DEVICES = ("cuda",)


@triton.jit
def leaky_add_clamp_gelu(y_ptr, bias_ptr, out_ptr, n, spatial, channels, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + (offsets // spatial) % channels, mask=mask).to(tl.float32)  # NCDHW: channel of each
    v = tl.where(v > 0, v, 0.2 * v)
    v = tl.minimum(tl.maximum(v + b, -1.0), 1.0)
    v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    tl.store(out_ptr + offsets, v.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        y = self.conv(x).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        block = 1024
        leaky_add_clamp_gelu[(triton.cdiv(n, block),)](
            y, self.sum_tensor.reshape(-1).contiguous(), out, n, y[0, 0].numel(), y.shape[1], BLOCK=block)
        return out
