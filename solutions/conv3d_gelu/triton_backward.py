"""Forward and backward for training (`kbench run --backward`): cuDNN Conv3d, then the element-wise tail fused in
Triton both ways.

Forward: one kernel reads the convolution's output y once and writes the result (leaky_relu, the per-channel
offset, clamp, erf GELU), as triton_fused does. Only y is kept for the backward: everything else is recomputed
from it. Backward: one kernel reads y and the upstream gradient once, writes the gradient with respect to y (for
cuDNN's convolution backward) and a partial sum of the offset's gradient per (sample, channel, block), which a
small torch sum folds per channel: no atomics, so the gradients are the same on every run.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

DEVICES = ("cuda",)

BLOCK = 2048


@triton.jit
def _tail_forward(y_ptr, bias_ptr, out_ptr, spatial, channels, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one (sample, channel) slice of `spatial` elements
    offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < spatial
    base = row.to(tl.int64) * spatial
    v = tl.load(y_ptr + base + offsets, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + row % channels).to(tl.float32)
    v = tl.where(v > 0, v, 0.2 * v)
    z = tl.minimum(tl.maximum(v + b, -1.0), 1.0)
    out = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    tl.store(out_ptr + base + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _tail_backward(y_ptr, bias_ptr, grad_ptr, grad_y_ptr, partial_ptr, spatial, channels, blocks,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    offsets = block * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < spatial
    base = row.to(tl.int64) * spatial
    y = tl.load(y_ptr + base + offsets, mask=mask).to(tl.float32)
    g = tl.load(grad_ptr + base + offsets, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + row % channels).to(tl.float32)
    v = tl.where(y > 0, y, 0.2 * y)
    s = v + b
    z = tl.minimum(tl.maximum(s, -1.0), 1.0)
    dgelu = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    inside = (s >= -1.0) & (s <= 1.0)  # torch.clamp passes the gradient at the bounds themselves
    grad_s = tl.where(inside & mask, g * dgelu, 0.0)
    grad_y = grad_s * tl.where(y > 0, 1.0, 0.2)
    tl.store(grad_y_ptr + base + offsets, grad_y.to(grad_y_ptr.dtype.element_ty), mask=mask)
    tl.store(partial_ptr + row.to(tl.int64) * blocks + block, tl.sum(grad_s, axis=0))


class _Tail(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, bias):
        y = y.contiguous()
        n, c = y.shape[0], y.shape[1]
        spatial = y[0, 0].numel()
        flat_bias = bias.reshape(-1).contiguous()
        out = torch.empty_like(y)
        _tail_forward[(n * c, triton.cdiv(spatial, BLOCK))](y, flat_bias, out, spatial, c, BLOCK=BLOCK)
        ctx.save_for_backward(y, flat_bias)
        ctx.bias_shape = bias.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        y, flat_bias = ctx.saved_tensors
        grad = grad.contiguous()
        n, c = y.shape[0], y.shape[1]
        spatial = y[0, 0].numel()
        blocks = triton.cdiv(spatial, BLOCK)
        grad_y = torch.empty_like(y)
        partial = torch.empty((n, c, blocks), device=y.device, dtype=torch.float32)
        _tail_backward[(n * c, blocks)](y, flat_bias, grad, grad_y, partial, spatial, c, blocks, BLOCK=BLOCK)
        grad_bias = partial.sum(dim=(0, 2)).to(flat_bias.dtype).reshape(ctx.bias_shape)
        return grad_y, grad_bias


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        return _Tail.apply(self.conv(x), self.sum_tensor)
