// One pipeline stage of mma.sync MMAs on a TMA buffer: the transposed kernels' 8 slots (2 per dimension) of one
// 8-channel chunk, A rounded to TF32 as it is loaded (tf32_a).
#pragma once

#include <cstdint>
#include "mma_sync.cuh"
#include "tile.cuh"
#include "tma.cuh"

namespace {

// One stage (the weights are TF32 already: the packing kernels round them): this warp's 32 voxels x 64 channels +=
// the stage's 8 channels x the slots in mask (bit (sd 2 + sh) 2 + sw). xa: this thread's A element (channel tig, voxel
// gid of the warp's run) at slot 0; wb: its ldmatrix row of B at slot 0 of its W-parity. Every address is one of these
// plus a constant.
template <int XBW, int XBH, int XPLANE, bool EXACT>
__device__ __forceinline__ void stage_taps(float (&acc)[2][8][4], const float* wb, const float* xa, uint32_t mask) {
#pragma unroll
    for (int slot = 0; slot < 8; ++slot) {
        if (!((mask >> slot) & 1u)) continue;  // uniform per warp
        const float* p = xa + ((slot >> 2) * XBH + ((slot >> 1) & 1)) * XBW + (slot & 1);
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            a[mt][0] = tf32_a<EXACT>(p[16 * mt]);
            a[mt][1] = tf32_a<EXACT>(p[16 * mt + 8]);
            a[mt][2] = tf32_a<EXACT>(p[4 * XPLANE + 16 * mt]);
            a[mt][3] = tf32_a<EXACT>(p[4 * XPLANE + 16 * mt + 8]);
        }
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            uint32_t b[4];
            ldmatrix_x4(b, wb + (slot * NB + jj * 16) * CK);
            mma_tf32(acc[0][2 * jj], a[0], b[0], b[1]);
            mma_tf32(acc[1][2 * jj], a[1], b[0], b[1]);
            mma_tf32(acc[0][2 * jj + 1], a[0], b[2], b[3]);
            mma_tf32(acc[1][2 * jj + 1], a[1], b[2], b[3]);
        }
    }
}

// stage_taps with A rounded exactly where the input holds a NaN the add would lose (exact = *wrap != 0, wrap_flag):
// a branch uniform over the block.
template <int XBW, int XBH, int XPLANE>
__device__ __forceinline__ void stage_mma(float (&acc)[2][8][4], const float* wb, const float* xa, uint32_t mask,
                                          bool exact) {
    if (exact) stage_taps<XBW, XBH, XPLANE, true>(acc, wb, xa, mask);
    else stage_taps<XBW, XBH, XPLANE, false>(acc, wb, xa, mask);
}

// This thread's ldmatrix row of B (see stage_taps): swz((pw 8 + slot) 64 + 16 jj + b_row, b_c) minus the constants.
__device__ __forceinline__ int b_offset(int lane, int pw) {
    const int q = lane >> 3, r = lane & 7, b_row = r + 8 * (q >> 1), b_c = 4 * (q & 1);
    return (pw * 8 * NB + b_row) * CK + (b_c ^ (b_row & 4));
}

}  // namespace
