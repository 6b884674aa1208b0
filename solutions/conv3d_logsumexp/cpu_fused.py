"""ATen conv3d, then max-pool + channel logsumexp + ReLU fused in one at::parallel_for pass."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

DEVICES = ("cpu",)
PRECISIONS = ("fp32",)  # float kernels: at fp16/bf16 the row is not_run

_CPP = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <limits>
#include <vector>

static void check5d(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
  TORCH_CHECK(t.dim() == 5, name, " must be 5-D");
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                   std::vector<int64_t> stride, std::vector<int64_t> padding,
                   std::vector<int64_t> dilation, int64_t groups,
                   std::vector<int64_t> pool_k, std::vector<int64_t> pool_s) {
  check5d(x, "x");
  check5d(weight, "weight");
  TORCH_CHECK(pool_k.size() == 3 && pool_s.size() == 3, "pool kernel/stride must have 3 entries");
  at::NoGradGuard no_grad;  // forward-only kernel: raw-pointer writes are invisible to autograd
  at::Tensor y = at::conv3d(x, weight, bias, stride, padding, dilation, groups).contiguous();

  const int64_t N = y.size(0), C = y.size(1), D = y.size(2), H = y.size(3), W = y.size(4);
  // MaxPool3d with padding 0, ceil_mode=False: floor division.
  const int64_t Do = (D - pool_k[0]) / pool_s[0] + 1;
  const int64_t Ho = (H - pool_k[1]) / pool_s[1] + 1;
  const int64_t Wo = (W - pool_k[2]) / pool_s[2] + 1;
  TORCH_CHECK(Do > 0 && Ho > 0 && Wo > 0, "pooled output would be empty");
  at::Tensor out = at::empty({N, 1, Do, Ho, Wo}, y.options());
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t HW = H * W, DHW = D * HW;

  // One task per output row (n, od, oh); pooled values for all channels of that row are
  // kept in a small buffer so the channel reduction never touches y twice.
  at::parallel_for(0, N * Do * Ho, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> pooled(C * Wo);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / (Do * Ho), od = (r / Ho) % Do, oh = r % Ho;
      for (int64_t c = 0; c < C; ++c) {
        const float* base = yp + (n * C + c) * DHW + od * pool_s[0] * HW + oh * pool_s[1] * W;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t kd = 0; kd < pool_k[0]; ++kd)
            for (int64_t kh = 0; kh < pool_k[1]; ++kh) {
              const float* p = base + kd * HW + kh * W + ow * pool_s[2];
              for (int64_t kw = 0; kw < pool_k[2]; ++kw) m = std::max(m, p[kw]);
            }
          pooled[c * Wo + ow] = m;
        }
      }
      float* orow = op + r * Wo;
      for (int64_t ow = 0; ow < Wo; ++ow) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < C; ++c) m = std::max(m, pooled[c * Wo + ow]);
        float lse = m;  // all -inf or +inf: logsumexp is the max itself (avoids inf - inf)
        if (std::isfinite(m)) {
          float s = 0.f;
          for (int64_t c = 0; c < C; ++c) s += std::exp(pooled[c * Wo + ow] - m);
          lse = m + std::log(s);
        }
        orow[ow] = lse > 0.f ? lse : 0.f;
      }
    }
  });
  return out;
}
"""

_ext = load_inline(
    name="kbench_cpu_conv3d_logsumexp",
    cpp_sources=_CPP,
    functions=["forward"],
    # -fopenmp: without it ATen's header-only parallel_for compiles to a serial loop.
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


def _triple(v):
    return list(v) if isinstance(v, (tuple, list)) else [v] * 3


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.max_pool = nn.MaxPool3d(kernel_size=2, stride=2)

    def forward(self, x):
        c, p = self.conv, self.max_pool
        return _ext.forward(
            x.contiguous(), c.weight, c.bias, list(c.stride), list(c.padding), list(c.dilation), c.groups,
            _triple(p.kernel_size), _triple(p.stride),
        )
