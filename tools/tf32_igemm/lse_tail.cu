__global__ void __launch_bounds__(THREADS, 2)
conv3d_tf32_pool_lse(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ bias,
                     float* __restrict__ out, const Geometry g) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int Dp = g.Do / 2, Hp = g.Ho / 2, Wp = g.Wo / 2;
    conv_pipeline<3, 27, true, POOLS>(x, wt, g, [&](float (&acc)[2][8][4], const TileOrigin& o) {
        // Accumulator (mt, j, half * 2 + e) is voxel (d = mt, h = 2 hp + half, w = 8 wb + gid), channel 8 j + 2 tig + e:
        // the thread's four (d, h) values and lane ^ 4's w neighbour make one 2x2x2 pool window per channel.
        float mx = -INFINITY, sum = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float v = fmaxf(fmaxf(acc[0][j][e], acc[0][j][2 + e]), fmaxf(acc[1][j][e], acc[1][j][2 + e]));
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
                const int k = j * 8 + 2 * tig + e;
                if (k < g.K) {
                    v += __ldg(bias + k);
                    // online logsumexp over this thread's channels
                    if (v > mx) { sum = sum * expf(mx - v) + 1.f; mx = v; }
                    else { sum += expf(v - mx); }
                }
            }
        }
        // Combine the four threads (tig) that hold the 64 channels of this pooled voxel.
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
            const float osum = __shfl_xor_sync(0xffffffffu, sum, off);
            const float nmx = fmaxf(mx, omx);
            sum = (mx == -INFINITY ? 0.f : sum * expf(mx - nmx)) + (omx == -INFINITY ? 0.f : osum * expf(omx - nmx));
            mx = nmx;
        }
        const int pd = o.od0 / 2, ph = o.oh0 / 2 + (warp >> 2), pw = o.ow0 / 2 + 4 * (warp & 3) + (gid >> 1);
        if (tig == 0 && (gid & 1) == 0 && pd < Dp && ph < Hp && pw < Wp) {
            out[(((long long)o.n * Dp + pd) * Hp + ph) * Wp + pw] = fmaxf(mx + logf(sum), 0.f);
        }
    });
}

}  // namespace

// x: (N, C, D, H, W); w: (K <= 64, C, 3, 3, 3), float32 CUDA. relu(logsumexp_c(maxpool2(conv(x) + bias))),
// stride 1, zero padding pad.
torch::Tensor conv3d_pool_lse_relu(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t pad) {
    check_inputs(x, w, "conv3d_pool_lse_relu");
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32, "conv3d_pool_lse_relu: float32 CUDA bias");
    TORCH_CHECK(w.size(0) <= NB, "conv3d_pool_lse_relu: at most 64 output channels");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    Geometry g = input_geometry(x, w, pad);
    TORCH_CHECK(g.Do > 0 && g.Ho > 0 && g.Wo > 0, "conv3d_pool_lse_relu: kernel larger than padded input");
    TORCH_CHECK(bias.numel() == g.K, "conv3d_pool_lse_relu: bias must have K values");
    auto out = torch::empty({g.N, 1, g.Do / 2, g.Ho / 2, g.Wo / 2}, x.options());
    if (out.numel() == 0) return out;
    auto wt = pack_weights(w, g, 3);
    auto b = bias.contiguous();
    set_tiles(g, g.Do / 2 * 2, g.Ho / 2 * 2, g.Wo / 2 * 2);  // only whole pool windows
    set_smem(g, 3, true, false);  // one kd plane of taps per stage: small buffers, two blocks per SM
    const size_t smem = smem_bytes(g);
    const dim3 grid = persistent_grid(conv3d_tf32_pool_lse, g, smem);
    conv3d_tf32_pool_lse<<<grid, THREADS, smem, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), wt.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), g);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
