"""How much a launch-bound model's eager time moves from one process to the next, and what steadies it.

    python bench/launch_bound.py tests/fixtures/problems/tiny_ops/model.py [more problem files] [--processes 4]

For each problem and each variant, `--processes` fresh Python processes each build the model and its inputs on the
GPU, warm up, and time `--samples` calls with kbench's CUDA-event timer (L2 flush, fresh synchronize per call). Per
process it prints the median timed ms and the median host issue ms (the time the call took to return: launch-bound
when it is most of the timed time); per variant, the spread of the per-process medians (max/min). Variants:

- plain: as kbench's processes time today;
- nogc: Python's garbage collector off during the samples (as timeit does), after one collection;
- pinned: the process pinned to one CPU core (the same core for every process);
- both: nogc and pinned;
- norandom: address-space randomisation off for the process (`setarch -R`).

With `--blocks N` each process also times N blocks of `--samples` calls one after another and prints each block's
median: a level that moves within one process is the machine's, not the process's.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

VARIANTS = ("plain", "nogc", "pinned", "both", "norandom")


def child(problem_path: str, variant: str, samples: int, blocks: int) -> dict[str, object]:
    import torch

    from kbench.judge.timing.timers import CudaEventTimer

    if variant in ("pinned", "both"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    spec = importlib.util.spec_from_file_location("problem", problem_path)
    assert spec and spec.loader
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = problem.Model(*problem.get_init_inputs()).cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    timer = CudaEventTimer(torch.device("cuda"))
    timed, issued = [], []
    with torch.no_grad():
        for _ in range(20):
            model(*inputs)
        torch.cuda.synchronize()
        if variant in ("nogc", "both"):
            gc.collect()
            gc.disable()
        for _ in range(samples):
            t, _ = timer.sample(lambda: model(*inputs))
            timed.append(t)
            issued.append(timer.last_issue)
        levels = []
        for _ in range(blocks):
            levels.append(statistics.median(timer.sample(lambda: model(*inputs))[0] for _ in range(samples)) * 1e3)
        gc.enable()
    return {"timed_ms": statistics.median(timed) * 1e3, "issue_ms": statistics.median(issued) * 1e3, "blocks": levels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--blocks", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.problems[0], args.child, args.samples, args.blocks)))
        return
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    for problem in args.problems:
        print(f"== {problem}")
        for variant in args.variants.split(","):
            runs = []
            for _ in range(args.processes):
                prefix = ["setarch", os.uname().machine, "-R"] if variant == "norandom" else []
                out = subprocess.run([*prefix, sys.executable, __file__, problem, "--child", variant, "--samples",
                                      str(args.samples), "--blocks", str(args.blocks)],
                                     capture_output=True, text=True, env=env, check=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                if args.blocks:
                    print(f"  {variant} block medians ms: {' '.join(f'{b:.3f}' for b in runs[-1]['blocks'])}")
            timed, issue = [r["timed_ms"] for r in runs], [r["issue_ms"] for r in runs]
            print(f"{variant:7s} timed ms per process: {' '.join(f'{t:.3f}' for t in timed)}  "
                  f"issue ms: {' '.join(f'{t:.3f}' for t in issue)}  spread {max(timed) / min(timed):.3f}")


if __name__ == "__main__":
    main()
