"""cuDNN ConvTranspose3d, then one Triton kernel fusing LayerNorm over the last axis, erf GELU and the scaling.

The reference's LayerNorm(out_channels) normalizes the last axis (the width, equal to out_channels): each program
normalizes a block of rows of that length, so mean, variance, the affine transform, GELU and the scale happen in
registers between one read and one write.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

DEVICES = ("cuda",)


@triton.jit
def layernorm_gelu_scale(y_ptr, weight_ptr, bias_ptr, out_ptr, rows, eps, scale, WIDTH: tl.constexpr,
                         ROWS: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    col = tl.arange(0, WIDTH)[None, :]
    mask = row < rows
    v = tl.load(y_ptr + row * WIDTH + col, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=1)[:, None] / WIDTH
    centered = v - mean
    var = tl.sum(centered * centered, axis=1)[:, None] / WIDTH
    v = centered / tl.sqrt(var + eps)
    v = v * tl.load(weight_ptr + col).to(tl.float32) + tl.load(bias_ptr + col).to(tl.float32)
    v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)) * scale
    tl.store(out_ptr + row * WIDTH + col, v.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True, eps=1e-5, scaling_factor=1.0):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.layer_norm = nn.LayerNorm(out_channels, eps=eps)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = self.conv_transpose(x).contiguous()
        width = y.shape[-1]
        if width & (width - 1):
            raise ValueError(f"this kernel needs a power-of-two width, got {width}")
        out = torch.empty_like(y)
        rows = y.numel() // width
        block_rows = 16
        layernorm_gelu_scale[(triton.cdiv(rows, block_rows),)](
            y, self.layer_norm.weight, self.layer_norm.bias, out, rows, self.layer_norm.eps,
            float(self.scaling_factor), WIDTH=width, ROWS=block_rows)
        return out
