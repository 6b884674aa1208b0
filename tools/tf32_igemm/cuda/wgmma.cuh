// Hopper warpgroup MMA (wgmma, sm_90a only: the solutions using it compile for that target alone; elsewhere the MMA
// traps).
// wgmma.m64n64k8 with TF32 inputs: a warpgroup (4 warps) multiplies 64 rows x 8 k of A by 8 k x 64 columns of B. Here
// A comes from registers, in the same fragment as mma.sync m16n8k8 (warp i of the group gives rows 16 i .. 16 i + 15,
// which rows they are is the warp's own choice), and B from shared memory through a descriptor. D's registers d[j][e]
// are the m16n8 accumulator of columns 8 j .. 8 j + 7, as with mma_tf32: the epilogues do not change.
//
// B is K-major without swizzling: 8 rows x 16 bytes core matrices, stored whole (128 bytes each); the two along K (k
// 0-3, 4-7) sit WG_LBO bytes apart, consecutive groups of 8 columns WG_SBO bytes apart, so one 8 x 64 operand is
// [n / 8][k / 4][n % 8][k % 4]: 2 KB. (Swapping the two offsets gives wrong results: attempt 12 ran both.)
#pragma once

#include <cstdint>
#include "tile.cuh"
#include "tma.cuh"  // smem_addr

namespace {

constexpr uint64_t WG_LBO = 128, WG_SBO = 256;
constexpr int WG_BWORDS = NB * CK;  // one B operand: 512 words
__device__ __forceinline__ uint64_t b_desc(const float* p) {
    return (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4) | ((WG_LBO >> 4) << 16) | ((WG_SBO >> 4) << 32);
}
// Word offset of B(k, n) in an operand.
__host__ __device__ __forceinline__ int wg_b_index(int k, int n) { return (((n >> 3) * 2 + (k >> 2)) * 8 + (n & 7)) * 4 + (k & 3); }
// Before a wgmma whose register operands other instructions wrote; after issuing, commit them as one group; wait
// until at most N groups are pending (then their registers and shared memory are free).
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// Keeps the compiler from touching accumulators between a wgmma and the wait that completes it.
__device__ __forceinline__ void fence_acc(float (&d)[8][4]) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e]) :: "memory");
}
// d += a x B(desc), 64 x 64 x 8 over the warpgroup.
__device__ __forceinline__ void wgmma_tf32(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
          "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
          "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
          "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
          "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
#else
    __trap();  // built for sm_90a only (the solution's compile flags)
#endif
}

}  // namespace
