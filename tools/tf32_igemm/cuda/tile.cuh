// The tile every TMA kernel computes and the launch geometry they share: 8-channel K chunks, 64-channel blocks,
// tiles of TD x TH x TW output voxels walked by persistent blocks, TF32 rounding of operands.
#pragma once

#include <cstdint>

namespace {

constexpr int CK = 8;           // input channels per K chunk (the MMA's k)
constexpr int NB = 64;          // output channels per block
constexpr int TD = 2, TH = 4, TW = 32;  // output voxels per tile: 256, one 32-voxel run along W per warp

// The kernels' parameter block (by value). wsz..resident are the old cp.async pipeline's, unused here, but they stay:
// without them the parameters after Geometry move (layernorm's eps and scale) and softmax's registers are allocated
// differently (compare_sass.py, 2026-11-25).
struct Geometry {
    int N, C, D, H, W;          // input
    int K, Do, Ho, Wo;          // output channels and sizes
    int pad;
    int chunks;                 // ceil(C / CK)
    int classes;                // output parity classes of a strided transposed convolution (1: a plain convolution)
    uint32_t masks[8];          // per class: which of the KS^3 taps exist (bit (kd * KS + kh) * KS + kw)
    int tiles_d, tiles_h, tiles_w;
    long long tiles;            // per 64-channel block
    int wsz, xsz, bsz;          // unused (see above)
    int resident;               // unused (see above)
};

__device__ __forceinline__ uint32_t round_tf32_bits(uint32_t v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(v)));
    return r;
}

__device__ __forceinline__ float round_tf32(float v) { return __uint_as_float(round_tf32_bits(__float_as_uint(v))); }

struct TileOrigin { int n, od0, oh0, ow0, cls; };

// Tile index -> origin; the class varies fastest, so the blocks running at once cover all classes of one region.
// Tile indices fit in int (persistent_grid checks), so these are 32-bit divisions, not 64-bit library calls.
// TILE_H: the tile's height (TH, or a kernel's own).
template <int TILE_H = TH>
__device__ __forceinline__ TileOrigin tile_origin(int tile, const Geometry& g) {
    TileOrigin o;
    o.cls = (int)(tile % g.classes); tile /= g.classes;
    o.ow0 = (int)(tile % g.tiles_w) * TW; tile /= g.tiles_w;
    o.oh0 = (int)(tile % g.tiles_h) * TILE_H; tile /= g.tiles_h;
    o.od0 = (int)(tile % g.tiles_d) * TD; tile /= g.tiles_d;
    o.n = (int)tile;
    return o;
}

// Tiles of TD x TILE_H x TW over an out_d x out_h x out_w grid (per class); a plain convolution has one class with
// every tap. TILE_H: as for tile_origin.
template <int TILE_H = TH>
void set_tiles(Geometry& g, int out_d, int out_h, int out_w, int classes = 1) {
    g.tiles_d = (out_d + TD - 1) / TD;
    g.tiles_h = (out_h + TILE_H - 1) / TILE_H;
    g.tiles_w = (out_w + TW - 1) / TW;
    g.classes = classes;
    g.tiles = (long long)g.N * g.tiles_d * g.tiles_h * g.tiles_w * classes;
    if (classes == 1) g.masks[0] = 0xffffffffu;
}

}  // namespace
