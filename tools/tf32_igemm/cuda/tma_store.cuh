// Results stored by TMA from swizzled shared memory: each warp pair stages a 64-channel x 32-voxel row and one
// thread copies it out; the copy engine clips what lies past the output's end.
#pragma once

#include <cstdint>
#include <cuda.h>
#include <torch/types.h>
#include "tile.cuh"
#include "tma.cuh"
#include "tma_maps.cuh"

namespace {

// The map's box (32, 1, 1, 64, 1) of the output at (w, h, d, c, n) from shared memory (128-byte swizzled); parts
// outside the tensor are not written.
__device__ __forceinline__ void tensor_store(const CUtensorMap* map, const float* src, int w, int h, int d, int c, int n) {
    asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];"
                 :: "l"(map), "r"(w), "r"(h), "r"(d), "r"(c), "r"(n), "r"(smem_addr(src)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__device__ __forceinline__ void store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void pair_barrier(int id) { asm volatile("bar.sync %0, 64;" :: "r"(id) : "memory"); }

constexpr int ROW_WORDS = NB * 32;        // output staging per warp pair: [channel 64][w 32]
constexpr int STAGE_WORDS = (TD * TH) * ROW_WORDS;  // 64 KB at the 1024-byte aligned start of shared memory

// Staging of the results (FAST epilogues): value (channel c = 8 j + 2 tig + e, w = 16 half + 2 gid + pw) of a warp
// pair's 64 x 32 block sits at c 32 + ((w / 4) ^ (c & 7)) 4 + w % 4 (TMA's 128-byte swizzle). With
// x_e = (gid / 2) ^ (2 tig + e) that is row + j 256 + (half 16 ^ base[e]): the half flips bit 4 only.
struct StagingSlots {
    float* row;
    int base[2];
    __device__ __forceinline__ StagingSlots(float* staging, int run, int gid, int tig, int pw) : row(staging + run * ROW_WORDS) {
#pragma unroll
        for (int e = 0; e < 2; ++e) base[e] = (2 * tig + e) * 32 + ((((gid >> 1) ^ (2 * tig + e)) & 7) << 2) + 2 * (gid & 1) + pw;
    }
};

// Each warp pair (warps run and run + 8) writes acc[mt] into its staging row and one thread stores it with one TMA
// copy at output (w0 + 32 mt, oh, od, channel 0, n); rows and columns past the output's end are clipped by the copy
// engine. A row is rewritten only after its previous store has read it.
__device__ __forceinline__ void store_tile(const float (&acc)[2][8][4], const StagingSlots& st, const CUtensorMap* omap,
                                           bool issuer, int run, int w0, int oh, int od, int n) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        if (issuer) store_wait_read();
        pair_barrier(1 + run);
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
                for (int j = 0; j < 8; ++j) st.row[j * 256 + ((half * 16) ^ st.base[e])] = acc[mt][j][half * 2 + e];
        async_proxy_fence();
        pair_barrier(1 + run);
        if (issuer) tensor_store(omap, st.row, w0 + 32 * mt, oh, od, 0, n);
    }
}

// The output (N, K = 64, Do, Ho, Wo) as a TMA destination for store_tile (Wo a multiple of 4).
CUtensorMap output_map(const torch::Tensor& out, const Geometry& g) {
    return tensor_map(out.data_ptr(), {(cuuint64_t)g.Wo, (cuuint64_t)g.Ho, (cuuint64_t)g.Do, (cuuint64_t)g.K,
                      (cuuint64_t)g.N}, g.Wo, {32, 1, 1, NB, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace
