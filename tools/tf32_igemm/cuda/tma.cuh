// Hopper (sm_90) staging: TMA copies on mbarriers into a persistent pipeline of shared-memory buffers. A stage is
// one chunk of 8 input channels (or one slab of it) of one tile: its weights arrive as one bulk copy (packed per call
// in shared-memory order) and its input window as one 5-D tensor copy, [channel 8][d XBD][h XBH][w XBW], zero-filled
// where it leaves the input. A is then read with plain LDS: lanes (gid, tig) read voxel gid of channel tig, so a
// channel plane of XPLANE = 8 or 24 (mod 32) words keeps the 32 lanes on 32 banks.
#pragma once

#include <cstdint>
#include <cuda.h>
#include "tile.cuh"

namespace {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

// The producer's arrival, announcing the bytes its copies will deliver to this barrier.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile("{\n\t.reg .pred done;\n\tWAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra WAIT;\n\t}" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void bulk_copy(float* dst, const float* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// The map's box at element coordinates (w, h, d, c, n); outside the tensor: zeros. w must be a multiple of 4 (16 bytes:
// the H100 faults with "illegal instruction" on any other innermost coordinate, negative ones included).
__device__ __forceinline__ void tensor_copy(float* dst, const CUtensorMap* map, uint64_t* bar, int w, int h, int d, int c,
                                            int n) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(w), "r"(h), "r"(d), "r"(c), "r"(n), "r"(smem_addr(bar))
                 : "memory");
}

constexpr int TMA_WWORDS = 16 * NB * CK;  // one stage's weights: 16 taps (2 W-parities x 8 slots) x 64 channels x 8

// An A element as TF32 (the MMA reads bits 31-13 and ignores the rest). EXACT: cvt.rna, which costs two instructions
// (a test for Inf and NaN, then the add). Otherwise the add alone: half a TF32 unit (0x1000) into the bits, which the
// truncating MMA turns into round to nearest, ties away, the same as cvt.rna for every finite value and for Inf.
// Only a NaN whose bits 30-12 are all ones (such as the GPU's own NaN, 0x7fffffff) would carry into the sign and read
// as -0: scan_wrap flags inputs that hold one, and the kernels then take the EXACT path.
template <bool EXACT>
__device__ __forceinline__ uint32_t tf32_a(float v) {
    return EXACT ? round_tf32_bits(__float_as_uint(v)) : __float_as_uint(v) + 0x1000u;
}

// The input window of a tile starts at w = ow0 - pad - window_shift(g), a multiple of 4 (ow0 is one, TW = 32), so the
// input at ow0 - pad sits window_shift(g) columns into the window: kernels add it to their A offsets.
__device__ __forceinline__ int window_shift(const Geometry& g) { return (-g.pad) & 3; }

// Per pipeline buffer: an mbarrier that completes when a stage's copies have landed in it, and the number of warps
// done with the stage it holds.
struct PipeSync {
    uint64_t full;
    unsigned done;
};

// Thread 0, before the block's first barrier: every buffer empty, no copy issued.
template <int NBUF>
__device__ __forceinline__ void pipe_init(PipeSync* sync) {
    for (int b = 0; b < NBUF; ++b) {
        mbar_init(&sync[b].full, 1);
        sync[b].done = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The persistent TMA pipeline over NBUF buffers of BUF words (WWORDS of weights first, then the input window;
// 128-byte multiples); sync: NBUF entries, set up by pipe_init. A tile's stages are its chunks of 8 input channels,
// each split into SLABS slabs (slab s: the window starts s planes deeper in d, and has its own weights, packed as
// [class][chunk][slab][WWORDS]). Per tile: mma(acc, buffer, origin, slab) per stage, then epilogue(acc, origin);
// tiles are TD x TILE_H x TW. No block-wide barrier per stage: each warp counts itself done with a buffer, and the
// last of them refills it with the stage NBUF later, so warps drift apart by up to a stage instead of waiting for the
// slowest at every stage.
template <int NBUF, int XWORDS, int BUF, int SLABS = 1, int WWORDS = TMA_WWORDS, int TILE_H = TH, typename Mma,
          typename Epilogue>
__device__ __forceinline__ void tma_pipeline(const CUtensorMap* xmap, const float* __restrict__ wt, const Geometry& g,
                                             float* bufs, PipeSync* sync, Mma&& mma, Epilogue&& epilogue) {
    static_assert(BUF % 32 == 0 && BUF >= WWORDS + XWORDS && WWORDS % 4 == 0, "buffers");
    const int tiles = (int)g.tiles, step = (int)gridDim.x, stages = g.chunks * SLABS;
    const int wlead = g.pad + window_shift(g);
    const unsigned warps = blockDim.x >> 5;
    // This block's stage k (0, 1, ...) is stage k % stages of tile blockIdx.x + (k / stages) step; one thread copies
    // it into buffer k % NBUF.
    auto issue = [&](int k, int b) {
        const int tile = (int)blockIdx.x + (k / stages) * step, s = k % stages;
        if (tile >= tiles) return;
        const TileOrigin o = tile_origin<TILE_H>(tile, g);
        float* buf = bufs + b * BUF;
        uint64_t* full = &sync[b].full;
        mbar_expect_tx(full, (WWORDS + XWORDS) * sizeof(float));
        bulk_copy(buf, wt + ((long long)o.cls * stages + s) * WWORDS, WWORDS * sizeof(float), full);
        tensor_copy(buf + WWORDS, xmap, full, o.ow0 - wlead, o.oh0 - g.pad, o.od0 - g.pad + s % SLABS, s / SLABS * CK,
                    o.n);
    };
    if (threadIdx.x == 0)
        for (int k = 0; k < NBUF; ++k) issue(k, k);
    int c_buf = 0, k = 0;
    uint32_t c_phase = 0;
    float acc[2][8][4];
    for (int tile = blockIdx.x; tile < tiles; tile += step) {
        const TileOrigin o = tile_origin<TILE_H>(tile, g);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
        for (int s = 0; s < stages; ++s, ++k) {
            mbar_wait(&sync[c_buf].full, c_phase);
            mma(acc, bufs + c_buf * BUF, o, s % SLABS);
            __syncwarp();  // the warp's shared-memory reads of this stage are done (their results fed its MMAs)
            if ((threadIdx.x & 31) == 0) {
                __threadfence_block();
                if (atomicAdd(&sync[c_buf].done, 1u) == warps - 1) {  // the last warp out refills the buffer
                    sync[c_buf].done = 0;  // released to the next users by the copy's mbarrier
                    issue(k + NBUF, c_buf);
                }
            }
            if (++c_buf == NBUF) { c_buf = 0; c_phase ^= 1; }
        }
        epilogue(acc, o);
    }
}

}  // namespace
