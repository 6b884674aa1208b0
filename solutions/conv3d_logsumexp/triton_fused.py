"""cuDNN Conv3d, then one Triton kernel fusing the 2x2x2 max pool, logsumexp over the channels and ReLU.

Each program takes a block of output positions of one batch element and walks the channels once: for each channel
it takes the max of the 2x2x2 window, then folds it into a running (max, sum of exponentials), the numerically
stable online logsumexp. The convolution's output is read once and the pooled tensor is never written.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

DEVICES = ("cuda",)


@triton.jit
def pool_logsumexp_relu(y_ptr, out_ptr, channels, depth, height, width, BLOCK: tl.constexpr):
    batch = tl.program_id(1)
    pd, ph, pw = depth // 2, height // 2, width // 2
    pos = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = pos < pd * ph * pw
    d, h, w = pos // (ph * pw), (pos // pw) % ph, pos % pw
    corner = (2 * d * height + 2 * h) * width + 2 * w  # the window's first element within one channel
    spatial = depth * height * width
    running_max = tl.full((BLOCK,), float("-inf"), tl.float32)
    running_sum = tl.zeros((BLOCK,), tl.float32)
    for c in range(channels):
        base = y_ptr + (batch * channels + c) * spatial + corner
        window = tl.full((BLOCK,), float("-inf"), tl.float32)
        for dz in range(2):
            for dy in range(2):
                for dx in range(2):
                    v = tl.load(base + (dz * height + dy) * width + dx, mask=mask, other=float("-inf"))
                    window = tl.maximum(window, v.to(tl.float32))
        new_max = tl.maximum(running_max, window)
        running_sum = running_sum * tl.exp(running_max - new_max) + tl.exp(window - new_max)
        running_max = new_max
    result = tl.maximum(running_max + tl.log(running_sum), 0.0)
    tl.store(out_ptr + batch * pd * ph * pw + pos, result.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.max_pool = nn.MaxPool3d(kernel_size=2, stride=2)  # kept for the reference's module layout

    def forward(self, x):
        y = self.conv(x).contiguous()
        n, c, d, h, w = y.shape
        out = torch.empty((n, 1, d // 2, h // 2, w // 2), device=y.device, dtype=y.dtype)
        block = 256
        grid = (triton.cdiv((d // 2) * (h // 2) * (w // 2), block), n)
        pool_logsumexp_relu[grid](y, out, c, d, h, w, BLOCK=block)
        return out
