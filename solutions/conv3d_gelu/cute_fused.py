"""cuDNN Conv3d, then one CuTe DSL kernel fusing leaky_relu, the per-channel offset, clamp and erf GELU.

The readable CuTe DSL example (the same split as triton_fused.py): the convolution stays in cuDNN, and the four
element-wise ops after it read and write the convolution's output once, one element per thread. `cute.compile`
runs once per process, on the first call (kbench's warm-up and correctness trials, never a timed call), with
dynamic layouts so that one compiled launcher serves every size; CUTE_DSL_CACHE_DIR keeps it. The kernel is
launched on PyTorch's current stream. CuTe DSL names the GPU kernel `kernel_cutlass_leaky_add_clamp_gelu_...`.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

DEVICES = ("cuda",)
PRECISIONS = ("fp32",)

THREADS = 256


@cute.kernel
def leaky_add_clamp_gelu(y: cute.Tensor, bias: cute.Tensor, out: cute.Tensor, n: cutlass.Int32,
                         spatial: cutlass.Int32, channels: cutlass.Int32):
    thread, _, _ = cute.arch.thread_idx()
    block, _, _ = cute.arch.block_idx()
    index = block * THREADS + thread
    if index < n:
        v = y[index]
        if v < 0.0:
            v = v * 0.2
        v = cutlass.min(cutlass.max(v + bias[(index // spatial) % channels], -1.0), 1.0)  # NCDHW: channel of each
        out[index] = 0.5 * v * (1.0 + cute.math.erf(v * 0.7071067811865476))


@cute.jit
def launch(y: cute.Tensor, bias: cute.Tensor, out: cute.Tensor, n: cutlass.Int32, spatial: cutlass.Int32,
           channels: cutlass.Int32, stream: cuda.CUstream):
    leaky_add_clamp_gelu(y, bias, out, n, spatial, channels).launch(
        grid=((n + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1), stream=stream)


def tensor(t: torch.Tensor) -> cute.Tensor:
    """A CuTe view of a contiguous 1-D tensor whose size is a run-time value (DLPack exports no autograd history:
    the kernel is for inference)."""
    return from_dlpack(t.detach(), assumed_align=16).mark_layout_dynamic()


_compiled = {}  # the launcher, compiled once per process on the first call


def compiled_launch():
    if "launch" not in _compiled:
        example = torch.empty(THREADS, device="cuda")
        _compiled["launch"] = cute.compile(launch, tensor(example), tensor(example), tensor(example), THREADS, 1, 1,
                                           cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return _compiled["launch"]


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        y = self.conv(x).contiguous()
        out = torch.empty_like(y)
        compiled_launch()(tensor(y.view(-1)), tensor(self.sum_tensor.reshape(-1).contiguous()), tensor(out.view(-1)),
                          y.numel(), y[0, 0].numel(), y.shape[1],
                          cuda.CUstream(torch.cuda.current_stream().cuda_stream))
        return out
