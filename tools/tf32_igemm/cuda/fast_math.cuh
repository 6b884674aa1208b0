// 2^x and 1 / x, one MUFU instruction each (relative errors about 2^-22 and 2^-23; 2^x below 2^-126 flushes to 0,
// which neither a softmax sum nor GELU's erfc can notice).
#pragma once

namespace {

__device__ __forceinline__ float exp2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

}  // namespace
