// The inputs whose fast TF32 rounding (tma.cuh, tf32_a) would be wrong: a scan of x that the kernels read to
// choose the exact rounding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/types.h>

namespace {

// *flag = 1 if x holds a NaN whose bits 30-12 are all ones (tf32_a's add would wrap it): one read of x. The kernels
// read the flag and take the exact rounding for such inputs.
__global__ void scan_wrap(const float* __restrict__ x, long long n, bool vec, unsigned* __restrict__ flag) {
    const long long stride = (long long)gridDim.x * blockDim.x, first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    auto wraps = [](float v) { return (__float_as_uint(v) & 0x7ffff000u) == 0x7ffff000u; };
    bool hit = false;
    long long i = first;
    if (vec) {  // 16-byte aligned: float4s, then the tail
        const float4* x4 = reinterpret_cast<const float4*>(x);
        for (; i < n / 4; i += stride) {
            const float4 v = x4[i];
            hit |= wraps(v.x) | wraps(v.y) | wraps(v.z) | wraps(v.w);
        }
        i = n / 4 * 4 + first;
    }
    for (; i < n; i += stride) hit |= wraps(x[i]);
    if (__any_sync(0xffffffffu, hit) && (threadIdx.x & 31) == 0) *flag = 1u;
}

// The flag scan_wrap sets for x (contiguous), for the kernels' rounding of A.
torch::Tensor wrap_flag(const torch::Tensor& x) {
    auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));
    const long long n = x.numel();
    const bool vec = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
    scan_wrap<<<(unsigned)std::min<long long>(((vec ? n / 4 : n) + 255) / 256, 1024), 256, 0,
                c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n, vec,
                                                     reinterpret_cast<unsigned*>(flag.data_ptr<int>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return flag;
}

}  // namespace
