// Stride-2 transposed convolution as 8 parity classes: output o = 2 j + p (per dimension) receives input i = j + s + dmin
// through kernel tap k = p + pad - 2 (s + dmin), for the slots s where that k exists. Each class is a plain
// 2x2x2-slot convolution over the input with the other slots masked off. A block takes one (d, h) parity pair
// (pair = 2 pd + ph) and both W-parities (SPLIT rows: warps 0-7 W-parity 0, warps 8-15 W-parity 1), so it writes
// whole W rows: both halves of every 32-byte sector of its stride-2 stores leave the block together.
constexpr int SLOTS = 2;
constexpr int SM_THREADS = 512;

__global__ void pack_transposed(const float* __restrict__ w, float* __restrict__ out, int C, int K, int ks, int pad,
                               int dmin, int chunks, long long total) {
    // out: [kblock][pair 4][chunk][pw 2][slot (sd, sh, sw)][k 64][ci 8], class = 2 pair + pw; TF32-rounded, zeros where
    // no tap or no channel.
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long t = i;
        const int ci8 = (int)(t % CK); t /= CK;
        const int n = (int)(t % NB); t /= NB;
        const int slot = (int)(t % (SLOTS * SLOTS * SLOTS)); t /= SLOTS * SLOTS * SLOTS;
        const int pw = (int)(t % 2); t /= 2;
        const int chunk = (int)(t % chunks); t /= chunks;
        const int cls = 2 * (int)(t % 4) + pw; t /= 4;
        const int kb = (int)t;
        const int ci = chunk * CK + ci8, co = kb * NB + n;
        const int kd = ((cls >> 2) & 1) + pad - 2 * (slot / 4 + dmin);
        const int kh = ((cls >> 1) & 1) + pad - 2 * ((slot / 2) % 2 + dmin);
        const int kw = (cls & 1) + pad - 2 * (slot % 2 + dmin);
        float v = 0.f;
        if (ci < C && co < K && kd >= 0 && kd < ks && kh >= 0 && kh < ks && kw >= 0 && kw < ks) {
            v = round_tf32(w[(((long long)ci * K + co) * ks + kd) * ks * ks + kh * ks + kw]);
        }
        out[i] = v;
    }
}

// 2^x, one MUFU.EX2 (relative error ~2^-22; results below 2^-126 flush to 0, which a softmax sum cannot notice).
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// sigmoid(p) for p in [0, 1] (a softmax probability): 0.5 + an odd minimax polynomial of degree 7, error 1.1e-7 in
// float32 (fitted on [0, 1.0001]); five FMA-pipe instructions instead of an exponential and a division.
__device__ __forceinline__ float sigmoid_unit(float p) {
    const float t = p * p;
    float r = -1.6942769e-04f;
    r = fmaf(r, t, 2.0539353e-03f);
    r = fmaf(r, t, -2.0825412e-02f);
    r = fmaf(r, t, 2.4999942e-01f);
    return fmaf(r, p, 0.5f);
}

__global__ void __launch_bounds__(SM_THREADS, 1)
convt3d_tf32_softmax_sigmoid(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ bias,
                             float* __restrict__ out, const Geometry g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int pw = warp >> 3, row = warp & 7, td = row / TH, th = row % TH;
    const long long cstride = (long long)g.Do * g.Ho * g.Wo;  // between output channels
    // Classes have 1 to 8 taps, so stages are short: round A fragments in registers rather than the tile per stage.
    conv_pipeline<SLOTS, 2 * SLOTS * SLOTS * SLOTS, false, SPLIT, true, SM_THREADS>(x, wt, g, [&](float (&acc)[2][8][4], const TileOrigin& o) {
        // Accumulator (mt, j, half * 2 + e): voxel w = 16 mt + 8 half + gid of this warp's run, channel 8 j + 2 tig + e.
        // The 64 channels of a voxel sit in the four threads tig = 0..3 of a quad: softmax = two shuffles each way.
        constexpr float LOG2E = 1.4426950408889634f;
        const int od = 2 * (o.od0 + td) + (o.cls >> 1), oh = 2 * (o.oh0 + th) + (o.cls & 1);
        const bool row_ok = od < g.Do && oh < g.Ho;
        // Channel 2 tig of voxel (od, oh, 0); a voxel's 16 values of this thread are then + (8 j + e) cstride + ow.
        float* const row = out + (((long long)o.n * g.K + 2 * tig) * g.Do + od) * g.Ho * g.Wo + (long long)oh * g.Wo;
        // Two passes: the results first replace the accumulators, then all 64 are stored. A load issued after stores
        // waits for them to leave the LSU (attempt 7), so no bias load may follow one of this tile's stores.
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float v[16];
                float mx = -INFINITY;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int k = j * 8 + 2 * tig + e;
                        v[2 * j + e] = k < g.K ? acc[mt][j][half * 2 + e] + __ldg(bias + k) : -INFINITY;
                        mx = fmaxf(mx, v[2 * j + e]);
                    }
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mx2 = mx * LOG2E;
                float sum = 0.f;
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    v[i] = exp2_approx(fmaf(v[i], LOG2E, -mx2));  // e^(v - mx); -inf (no channel) gives 0
                    sum += v[i];
                }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                const float inv = __fdividef(1.f, sum);  // sum in [1, 64]
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) acc[mt][j][half * 2 + e] = sigmoid_unit(v[2 * j + e] * inv);
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int ow = 2 * (o.ow0 + 16 * mt + 8 * half + gid) + pw;
                if (row_ok && ow < g.Wo) {
                    float* dst = row + ow;
#pragma unroll
                    for (int j = 0; j < 8; ++j, dst += 8 * cstride) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            if (j * 8 + 2 * tig + e < g.K) dst[e * cstride] = acc[mt][j][half * 2 + e];
                        }
                    }
                }
            }
        }
    });
}

}  // namespace

// x: (N, C, D, H, W); w: (C, K <= 64, ks, ks, ks) float32 CUDA, a ConvTranspose3d weight with stride 2 whose taps
// fall into two slots per dimension (e.g. ks 3, padding 1). Returns sigmoid(softmax_channels(convT(x) + bias)).
torch::Tensor convt3d_softmax_sigmoid(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad, int64_t out_pad) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && bias.is_cuda(), "convt3d_softmax_sigmoid: CUDA tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "convt3d_softmax_sigmoid: float32 only");
    TORCH_CHECK(x.dim() == 5 && w.dim() == 5 && w.size(0) == x.size(1), "convt3d_softmax_sigmoid: shape mismatch");
    const int ks = (int)w.size(2);
    TORCH_CHECK(w.size(3) == ks && w.size(4) == ks, "convt3d_softmax_sigmoid: cubic kernels only");
    TORCH_CHECK(w.size(1) <= NB && bias.numel() == w.size(1), "convt3d_softmax_sigmoid: up to 64 output channels");
    // Slots per dimension: delta = (p + pad - k) / 2 over the taps k of both parities p.
    int dmin = 1 << 20, dmax = -(1 << 20);
    for (int p = 0; p < 2; ++p)
        for (int k = 0; k < ks; ++k)
            if ((p + pad - k) % 2 == 0) { dmin = std::min(dmin, (int)(p + pad - k) / 2); dmax = std::max(dmax, (int)(p + pad - k) / 2); }
    TORCH_CHECK(dmax - dmin + 1 == SLOTS, "convt3d_softmax_sigmoid: the kernel needs 2 slots per dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto wc = w.contiguous();
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    g.K = (int)w.size(1); g.pad = -dmin;
    g.Do = (g.D - 1) * 2 - 2 * (int)pad + ks + (int)out_pad;
    g.Ho = (g.H - 1) * 2 - 2 * (int)pad + ks + (int)out_pad;
    g.Wo = (g.W - 1) * 2 - 2 * (int)pad + ks + (int)out_pad;
    g.chunks = (g.C + CK - 1) / CK;
    auto out = torch::empty({g.N, g.K, g.Do, g.Ho, g.Wo}, x.options());
    if (out.numel() == 0) return out;
    // Which slots each class has (the same formula as the packing kernel).
    for (int cls = 0; cls < 8; ++cls) {
        uint32_t mask = 0;
        for (int slot = 0; slot < 8; ++slot) {
            const int k3[3] = {((cls >> 2) & 1) + (int)pad - 2 * (slot / 4 + dmin),
                               ((cls >> 1) & 1) + (int)pad - 2 * ((slot / 2) % 2 + dmin),
                               (cls & 1) + (int)pad - 2 * (slot % 2 + dmin)};
            bool ok = true;
            for (int d = 0; d < 3; ++d) ok = ok && k3[d] >= 0 && k3[d] < ks;
            if (ok) mask |= 1u << slot;
        }
        g.masks[cls >> 1] |= mask << (8 * (cls & 1));  // pair cls / 2: W-parity 0 in bits 0-7, 1 in bits 8-15
    }
    const long long total = 8LL * g.chunks * SLOTS * SLOTS * SLOTS * NB * CK;
    auto wt = torch::empty({total}, w.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    pack_transposed<<<(unsigned)std::min<long long>((total + 255) / 256, 4096), 256, 0, stream>>>(
        wc.data_ptr<float>(), wt.data_ptr<float>(), g.C, g.K, ks, (int)pad, dmin, g.chunks, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto b = bias.contiguous();
    set_tiles(g, (g.Do + 1) / 2, (g.Ho + 1) / 2, (g.Wo + 1) / 2, 4);
    set_smem(g, SLOTS, false, false, 2 * SLOTS * SLOTS * SLOTS);
    const size_t smem = smem_bytes(g);
    dim3 grid = persistent_grid(convt3d_tf32_softmax_sigmoid, g, smem, SM_THREADS);
    // Pairs differ in work (2 to 16 taps): an odd grid makes each block cycle through all of them.
    if (grid.x % 2 == 0 && grid.x > 1 && (long long)grid.x < g.tiles) grid.x -= 1;
    convt3d_tf32_softmax_sigmoid<<<grid, SM_THREADS, smem, stream>>>(
        x.data_ptr<float>(), wt.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
