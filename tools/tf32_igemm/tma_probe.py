"""On a Hopper GPU: does one TMA tensor copy of a box of x load what slicing says it should?

A development aid, written for the layernorm TMA fault (docs/solutions.md, attempts 9 and 10). It runs a single
tensor copy, nothing else, with the map built by cuda/tma_maps.cuh's own `input_map`, for a given input shape, box and
coordinates; each case in a fresh process, so a fault ends one case, not the run. It prints ok / wrong / FAULT per
case. What it found on the H100: the innermost (w) coordinate must be a multiple of 16 bytes; w = -1 or 3 faults
with "illegal instruction", while negative h and d, and w = 0, 4, 8, load correctly. The built-in cases are the ones
of that run, with the verdicts it gave as comments.

    python tools/tf32_igemm/tma_probe.py            # the built-in cases
    python tools/tf32_igemm/tma_probe.py --case 32,32,16,32,32:36,6,5,8:-1,-1,-1,0,0

A case is N,C,D,H,W:w,h,d,c (the box):w,h,d,c,n (the coordinates), optionally :threads,smem,dst,bar (block size,
dynamic shared memory bytes, and the byte offsets of the destination and the mbarrier in it) to mimic a kernel's
context.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# input shape (N, C, D, H, W) : box (w, h, d, c) : coordinates (w, h, d, c, n); the verdict on the H100
CASES = [
    "16,32,16,32,32:40,5,3,8:0,0,0,0,0",           # ok
    "16,32,16,32,32:40,5,3,8:0,4,2,8,1",           # ok
    "16,32,16,32,32:40,5,3,8:-1,0,0,0,0",          # FAULT
    "16,32,16,32,32:40,5,3,8:0,-1,0,0,0",          # ok
    "16,32,16,32,32:40,5,3,8:0,0,-1,0,0",          # ok
    "16,32,16,32,32:40,5,3,8:4,0,0,0,0",           # ok
    "16,32,16,32,64:40,5,3,8:0,0,0,0,0",           # ok
    "16,32,16,32,64:40,5,3,8:8,0,0,0,0",           # ok
    "32,32,16,32,32:36,6,5,8:0,0,0,0,0",           # ok
    "32,32,16,32,32:36,6,5,8:0,4,2,8,1",           # ok
    "32,32,16,32,32:32,6,5,8:0,4,2,8,1",           # ok
    "32,32,16,32,32:36,6,5,8:-1,0,0,0,0",          # FAULT
]

_CPP = ("torch::Tensor probe(torch::Tensor x, std::vector<int64_t> box, std::vector<int64_t> at, "
        "std::vector<int64_t> ctx);")

_DEVICE = r"""
__global__ void probe_kernel(const __grid_constant__ CUtensorMap map, float* out, int words, int w, int h, int d,
                             int c, int n, int dst_off, int bar_off) {
    extern __shared__ __align__(1024) float base[];
    float* tile = base + dst_off / 4;
    uint64_t* bar = reinterpret_cast<uint64_t*>(base + bar_off / 4);
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect_tx(bar, words * sizeof(float));
        tensor_copy(tile, &map, bar, w, h, d, c, n);
    }
    __syncthreads();
    mbar_wait(bar, 0);
    for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = tile[i];
}
"""

_HOST = r"""
torch::Tensor probe(torch::Tensor x, std::vector<int64_t> box, std::vector<int64_t> at, std::vector<int64_t> ctx) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 5 && box.size() == 4 && at.size() == 5, "probe: bad arguments");
    x = x.contiguous();
    Geometry g{};
    g.N = (int)x.size(0); g.C = (int)x.size(1); g.D = (int)x.size(2); g.H = (int)x.size(3); g.W = (int)x.size(4);
    const cuuint32_t b[5] = {(cuuint32_t)box[0], (cuuint32_t)box[1], (cuuint32_t)box[2], (cuuint32_t)box[3], 1};
    torch::Tensor keep;
    const CUtensorMap map = input_map(x, g, b, keep);
    const int words = (int)(box[0] * box[1] * box[2] * box[3]);
    auto out = torch::empty({box[3], box[2], box[1], box[0]}, x.options());
    size_t smem = sizeof(float) * ((words + 31) / 32 * 32) + sizeof(uint64_t);
    int threads = 128, dst_off = 0, bar_off = (int)(smem - sizeof(uint64_t));
    if (ctx.size() == 4) { threads = (int)ctx[0]; smem = (size_t)ctx[1]; dst_off = (int)ctx[2]; bar_off = (int)ctx[3]; }
    C10_CUDA_CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    probe_kernel<<<1, threads, smem, c10::cuda::getCurrentCUDAStream()>>>(
        map, out.data_ptr<float>(), words, (int)at[0], (int)at[1], (int)at[2], (int)at[3], (int)at[4], dst_off, bar_off);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""


def _extension():
    from torch.utils.cpp_extension import load_inline

    sys.path.insert(0, str(HERE))
    import assemble  # noqa: E402  (the same fragments the solutions get: tma.cuh's copies, tma_maps.cuh's input_map)

    probe = assemble.Source("tma_probe", [], ["#include <torch/extension.h>", "#include <c10/cuda/CUDAStream.h>"],
                            ["tma.cuh", "tma_maps.cuh"], _DEVICE.strip("\n"), _HOST.strip("\n"))
    cuda = assemble.combine(probe)
    return load_inline(name="kbench_tma_probe", cpp_sources=_CPP, cuda_sources=cuda, functions=["probe"],
                       extra_cuda_cflags=["-O3"], verbose=False)


def run_case(spec: str) -> str:
    import torch
    import torch.nn.functional as F

    parts = [[int(v) for v in part.split(",")] for part in spec.split(":")]
    shape, box, at = parts[:3]
    ctx = parts[3] if len(parts) > 3 else []
    x = torch.rand(*shape, device="cuda")
    got = _extension().probe(x, box, at, ctx)
    torch.cuda.synchronize()
    # What the copy should load: the box at `at`, zeros outside x.
    w, h, d, c, n = at
    pad = F.pad(x[n], (300, 300, 300, 300, 300, 300))  # (C, D, H, W), 300 zeros each side of d, h, w
    want = pad[c: c + box[3], d + 300: d + 300 + box[2], h + 300: h + 300 + box[1], w + 300: w + 300 + box[0]]
    want = torch.cat([want, torch.zeros(box[3] - want.shape[0], *want.shape[1:], device="cuda")])
    return "ok" if torch.equal(got, want) else f"wrong (max diff {(got - want).abs().max().item():.3g})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="N,C,D,H,W:w,h,d,c:w,h,d,c,n (repeatable)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: run one case and print its verdict
    args = parser.parse_args()
    if args.one:
        print(run_case(args.one), flush=True)
        return 0
    _extension()  # build once, in this process, before the children load it
    failed = False
    for spec in args.case or CASES:
        child = subprocess.run([sys.executable, __file__, "--one", spec], capture_output=True, text=True, timeout=300)
        lines = (child.stdout + child.stderr).strip().splitlines()
        verdict = lines[-1] if child.returncode == 0 and lines else "FAULT: " + next(
            (line for line in lines if "Error" in line), "exit %d" % child.returncode)
        failed |= verdict != "ok"
        print(f"{spec:45s} {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
