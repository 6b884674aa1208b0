"""ATen conv3d, then leaky-ReLU + per-channel add + clamp + erf GELU fused in one at::parallel_for pass."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cpu",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

static void check5d(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
  TORCH_CHECK(t.dim() == 5, name, " must be 5-D");
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   const at::Tensor& sum_tensor, std::vector<int64_t> stride, std::vector<int64_t> padding,
                   std::vector<int64_t> dilation, int64_t groups,
                   double negative_slope, double clamp_min, double clamp_max) {
  check5d(x, "x");
  check5d(weight, "weight");
  TORCH_CHECK(sum_tensor.device().is_cpu() && sum_tensor.scalar_type() == at::kFloat,
              "sum_tensor must be a float32 CPU tensor");
  at::NoGradGuard no_grad;  // forward-only kernel: raw-pointer writes are invisible to autograd
  // The conv output is our own temporary, so the epilogue overwrites it instead of allocating.
  at::Tensor y = at::conv3d(x, weight, bias, stride, padding, dilation, groups).contiguous();

  const int64_t N = y.size(0), C = y.size(1), S = y.size(2) * y.size(3) * y.size(4);
  // Only the per-channel broadcast shape (C,1,1,1) / (C,) is supported.
  TORCH_CHECK(sum_tensor.numel() == C, "sum_tensor must hold one value per output channel");
  at::Tensor st = sum_tensor.contiguous();
  const float* sp = st.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const float slope = (float)negative_slope, lo = (float)clamp_min, hi = (float)clamp_max;

  at::parallel_for(0, N * C, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const float add = sp[nc % C];
      float* p = yp + nc * S;
      for (int64_t i = 0; i < S; ++i) {
        float v = p[i];
        v = v >= 0.f ? v : v * slope;
        v = std::min(std::max(v + add, lo), hi);
        p[i] = 0.5f * v * (1.f + std::erf(v * (float)M_SQRT1_2));
      }
    }
  });
  return y;
}
"""

_ext = load_inline(
    name="kbench_cpu_conv3d_gelu",
    cpp_sources=_CPP,
    functions=["forward"],
    # -fopenmp: without it ATen's header-only parallel_for compiles to a serial loop.
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        c = self.conv
        # 0.2 and [-1, 1] are the constants hard-coded in the reference forward.
        return _ext.forward(
            x.contiguous(), c.weight, c.bias, self.sum_tensor, list(c.stride), list(c.padding),
            list(c.dilation), c.groups, 0.2, -1.0, 1.0,
        )
