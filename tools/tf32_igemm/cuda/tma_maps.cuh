// Host side of the TMA copies: tensor maps (CUtensorMap), and the input's, with a padded copy of the input where its
// rows are not 16-byte multiples (tma_store.cuh has the output's).
#pragma once

#include <cstdint>
#include <cuda.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>
#include <torch/types.h>
#include "tile.cuh"

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
    static EncodeTiled encode = nullptr;
    if (encode == nullptr) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        TORCH_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr, "tf32_igemm: no cuTensorMapEncodeTiled");
        encode = reinterpret_cast<EncodeTiled>(fn);
    }
    return encode;
}

// A float32 (d4, d3, d2, d1, d0) tensor whose rows have a pitch of pitch0 >= d0 elements (a multiple of 4), as a TMA
// map with this box.
CUtensorMap tensor_map(void* base, const cuuint64_t (&dims)[5], cuuint64_t pitch0, const cuuint32_t (&box)[5],
                       CUtensorMapSwizzle swizzle) {
    const cuuint64_t row = pitch0 * sizeof(float);
    const cuuint64_t strides[4] = {row, row * dims[1], row * dims[1] * dims[2], row * dims[1] * dims[2] * dims[3]};
    const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
    CUtensorMap map;
    const CUresult rc = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, base, dims, strides, box, unit,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TORCH_CHECK(rc == CUDA_SUCCESS, "tf32_igemm: cuTensorMapEncodeTiled failed (", (int)rc, ")");
    return map;
}

// The input as a TMA source with this box: x itself where its rows are 16-byte multiples on a 16-byte aligned base,
// else a copy padded to such rows (zeros past W). The copy, if any, is returned in keep and must outlive the kernel.
CUtensorMap input_map(const torch::Tensor& x, const Geometry& g, const cuuint32_t (&box)[5], torch::Tensor& keep) {
    const int wp = (g.W + 3) / 4 * 4;
    keep = x;
    if (wp != g.W || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0) {
        keep = torch::zeros({g.N, g.C, g.D, g.H, wp}, x.options());
        keep.narrow(4, 0, g.W).copy_(x);
    }
    return tensor_map(keep.data_ptr(), {(cuuint64_t)g.W, (cuuint64_t)g.H, (cuuint64_t)g.D, (cuuint64_t)g.C,
                      (cuuint64_t)g.N}, wp, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace
