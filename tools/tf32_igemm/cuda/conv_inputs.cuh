// Argument checks and output sizes of a plain (stride 1) 3x3x3 Conv3d.
#pragma once

#include <torch/types.h>
#include "tile.cuh"

namespace {

Geometry input_geometry(const torch::Tensor& x, const torch::Tensor& w, int64_t pad) {
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    g.K = (int)w.size(0); g.pad = (int)pad;
    const int KS = (int)w.size(2);
    g.Do = g.D + 2 * g.pad - KS + 1; g.Ho = g.H + 2 * g.pad - KS + 1; g.Wo = g.W + 2 * g.pad - KS + 1;
    g.chunks = (g.C + CK - 1) / CK;
    return g;
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& w, const char* who) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), who, ": CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, who, ": float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(1) == x.size(1), who, ": shape mismatch");
    TORCH_CHECK(w.size(2) == 3 && w.size(3) == 3 && w.size(4) == 3, who, ": 3x3x3 kernels only");
    TORCH_CHECK(x.device() == w.device(), who, ": tensors on different devices");
}

}  // namespace
