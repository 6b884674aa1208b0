"""cuDNN Conv3d, then one TileLang kernel fusing leaky_relu, the per-channel offset, clamp and erf GELU.

The readable TileLang example (the same split as triton_fused.py): the convolution stays in cuDNN, and the four
element-wise ops after it read and write the convolution's output once. `@tilelang.jit` compiles the kernel once
per shape, on the first call (kbench's warm-up and correctness trials, never a timed call), and keeps it in
TILELANG_CACHE_DIR. TileLang names the GPU kernel after the prim_func: `fused_kernel`.
"""

import tilelang
import tilelang.language as T
import torch
import torch.nn as nn

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)

BLOCK = 1024  # elements per thread block: 256 threads, four elements each


@tilelang.jit
def leaky_add_clamp_gelu(n: int, spatial: int, channels: int):
    @T.prim_func
    def fused(y: T.Tensor((n,), "float32"), bias: T.Tensor((channels,), "float32"),
              out: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, BLOCK), threads=256) as block:
            for i in T.Parallel(BLOCK):
                index = block * BLOCK + i
                if index < n:
                    v = y[index]
                    v = T.if_then_else(v > 0, v, v * 0.2)
                    v = T.min(T.max(v + bias[(index // spatial) % channels], -1.0), 1.0)  # NCDHW: channel of each
                    out[index] = 0.5 * v * (1.0 + T.erf(v * 0.7071067811865476))

    return fused


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        y = self.conv(x).contiguous()
        out = torch.empty_like(y)
        kernel = leaky_add_clamp_gelu(y.numel(), y[0, 0].numel(), y.shape[1])
        kernel(y.view(-1), self.sum_tensor.reshape(-1).contiguous(), out.view(-1))
        return out
