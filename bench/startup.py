"""What a process's GPU start-up costs alone and with others starting at once: the CUDA context with one small
convolution and one product (what kbench's workers and candidates do ahead of their jobs, `warm_cuda`), and NVML's
start with one device query (read after every timing).

    python bench/startup.py                 # CUDA: alone twice, one per visible GPU at once twice, two per GPU
    python bench/startup.py --nvml          # NVML: alone twice, 4 and 8 at once

Each line: how many processes, on which GPUs, and per process the seconds of its import of torch and of its CUDA
start (or of nvmlInit and the query). GPUs are those CUDA_VISIBLE_DEVICES names (default 0,1,2,3).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CUDA = r'''
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
x = torch.ones(1, 2, 6, 6, device="cuda")
torch.nn.functional.conv2d(x, torch.ones(2, 2, 3, 3, device="cuda"))
a = torch.ones(16, 16, device="cuda")
torch.mm(a, a)
torch.cuda.synchronize()
print(f"{t1 - t0:.3f} {time.perf_counter() - t1:.3f}")
'''

NVML = r'''
import ctypes, time
t0 = time.perf_counter()
lib = ctypes.CDLL("libnvidia-ml.so.1")
lib.nvmlInit_v2()
t1 = time.perf_counter()
handle, count = ctypes.c_void_p(), ctypes.c_uint()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), None)
print(f"{t1 - t0:.4f} {time.perf_counter() - t1:.4f}")
'''


def at_once(code: str, gpus: list[str]) -> list[str]:
    procs = [subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "CUDA_VISIBLE_DEVICES": g},
                              stdout=subprocess.PIPE, text=True) for g in gpus]
    return [p.communicate()[0].strip() for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvml", action="store_true", help="NVML's start instead of CUDA's")
    args = parser.parse_args()
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "0,1,2,3").split(",") if g.strip()]
    if args.nvml:
        sets = [[gpus[0]], [gpus[0]], [gpus[0]] * 4, [gpus[0]] * 8]
    else:
        sets = [[gpus[0]], [gpus[0]], gpus, gpus, gpus * 2]
    print("processes | GPUs | per process: " + ("nvmlInit s, query s" if args.nvml else "import torch s, CUDA start s"))
    for chosen in sets:
        print(f"{len(chosen)} | {','.join(chosen)} | {', '.join(at_once(NVML if args.nvml else CUDA, chosen))}",
              flush=True)


if __name__ == "__main__":
    main()
