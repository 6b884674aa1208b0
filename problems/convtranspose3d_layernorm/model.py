"""KernelBench level 2, problem 34: ConvTranspose3d -> LayerNorm -> GELU -> scaling."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Transposed 3-D convolution, LayerNorm(out_channels), exact GELU, then a constant scale.

    nn.LayerNorm(out_channels) normalizes the *last* axis of the 5-D output (its width), not the
    channels; that only type-checks because the output width equals out_channels. These are the
    reference semantics and solutions must reproduce them.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True, eps=1e-5, scaling_factor=1.0):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.layer_norm = nn.LayerNorm(out_channels, eps=eps)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.layer_norm(x)
        x = torch.nn.functional.gelu(x)
        return x * self.scaling_factor


batch_size = 32
in_channels = 32
out_channels = 64
D, H, W = 16, 32, 32
kernel_size = 4
stride = 2
padding = 1
bias = True
eps = 1e-5
scaling_factor = 1.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, bias, eps, scaling_factor]
