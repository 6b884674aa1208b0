// The launch grid of a persistent kernel: as many blocks as fit on the GPU at once (at most one per tile) per
// 64-channel block of the output.
#pragma once

#include <algorithm>
#include <climits>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include "tile.cuh"

namespace {

template <typename Kernel>
dim3 persistent_grid(Kernel kernel, const Geometry& g, size_t smem, int threads) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int device = 0, sms = 0, per_sm = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    TORCH_CHECK(per_sm > 0, "kernel does not fit on this GPU (shared memory)");
    const long long blocks = std::min(g.tiles, (long long)sms * per_sm);
    TORCH_CHECK(g.tiles + blocks <= INT_MAX, "too many tiles");  // the kernels count tiles in int
    return dim3((unsigned)blocks, (unsigned)((g.K + NB - 1) / NB));
}

}  // namespace
