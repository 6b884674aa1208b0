"""Do the CUDA driver calls of a memory draw cost more while other GPUs of the host are busy with kbench-like work?

    python bench/driver_contention.py [--seconds 15] [--mb 256]

On a machine with several GPUs, level 2's honest rows spent 4x longer per memory draw (kbench.judge.timing.placement)
with four GPUs busy than with one (2026-11-28, docs/benchmarks.md). A draw is driver work: the caching allocator's
blocks handed back (cudaFree), a spacer allocated (cudaMalloc), a call whose outputs are new allocations, and the
judge mapping those outputs from the candidate's process (cudaIpcOpenMemHandle). This times that sequence on GPU 0,
a step at a time, in four settings one after another:

  alone      nothing else on the machine
  contexts   on every other GPU, two loops of fresh Python processes that make a CUDA context and exit (what the
             spare candidate processes of a kbench run do)
  draws      the same sequence on every other GPU at once (what the other slots' judges do)
  both       contexts and draws

and prints per setting the median and 90th percentile of each step in milliseconds, and the whole sequence's median
over the alone one's; then, in each setting, how long a fresh process on GPU 0 takes to make its CUDA context (after
`import torch`: `torch.cuda.init()` and a first allocation), the step a kbench worker or candidate takes before its
job's turn, median of `--contexts` processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CONTEXT = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
TIMED_CONTEXT = ("import time, torch; t = time.perf_counter(); torch.cuda.init(); torch.zeros(1, device='cuda'); "
                 "torch.cuda.synchronize(); print(time.perf_counter() - t)")


def context_seconds(count: int) -> list[float]:
    """How long each of `count` fresh processes on this process's GPU took to make its CUDA context."""
    found = []
    for _ in range(count):
        done = subprocess.run([sys.executable, "-c", TIMED_CONTEXT], capture_output=True, text=True, check=False)
        try:
            found.append(float(done.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            pass
    return found


def _producer(queue, done, mb: int) -> None:  # a candidate: a fresh allocation each time, shared with the judge
    import torch

    while True:
        if done.is_set():
            return
        torch.cuda.empty_cache()
        out = torch.full((mb << 18,), 1.0, device="cuda")
        torch.cuda.synchronize()
        queue.put(out)
        del out
        if done.wait(0.0):
            return


def probe(seconds: float, mb: int, report: bool = True) -> dict[str, list[float]]:
    """The draw's steps on this process's GPU for `seconds`: their times in ms."""
    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue, done = ctx.Queue(maxsize=1), ctx.Event()
    child = ctx.Process(target=_producer, args=(queue, done, mb), daemon=True)
    child.start()
    x = torch.randn(64, 64, 64, 64, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    steps: dict[str, list[float]] = {"empty_cache": [], "spacer": [], "call": [], "ipc_map": [], "total": []}
    spacer = None
    queue.get()  # the first one: both processes' start is not measured
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        spacer = None
        torch.cuda.empty_cache()
        t1 = time.perf_counter()
        spacer = torch.empty(((hash(t0) % 256) + 1) << 21, dtype=torch.uint8, device="cuda")
        t2 = time.perf_counter()
        y = torch.nn.functional.conv2d(x, w, padding=1)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        mapped = queue.get()  # maps the candidate's new allocation (cudaIpcOpenMemHandle)
        float(mapped[0])
        t4 = time.perf_counter()
        del mapped, y
        for name, value in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
            steps[name].append(value * 1e3)
    done.set()
    try:
        queue.get(timeout=1.0)
    except Exception:  # noqa: BLE001 - the producer may have stopped first
        pass
    child.join(5.0)
    if child.is_alive():
        child.kill()
    del spacer
    return steps


def _contexts(gpu: str, stop_at: float) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    while time.perf_counter() < stop_at:
        subprocess.run([sys.executable, "-c", CONTEXT], env=env, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--mb", type=int, default=256, help="the candidate's output size (MB)")
    parser.add_argument("--contexts", type=int, default=5, help="fresh processes timed making a context, per setting")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        probe(args.seconds, args.mb)
        return
    import torch

    gpus = [str(i) for i in range(torch.cuda.device_count())]
    print(f"{torch.cuda.get_device_name(0)} x{len(gpus)}, torch {torch.__version__}, {os.cpu_count()} cores")
    others = gpus[1:]
    first = None
    for setting in ("alone", "contexts", "draws", "both"):
        if setting != "alone" and not others:
            break
        background: list[subprocess.Popen] = []
        stop_at = time.perf_counter() + args.seconds + 12 + 3 * args.contexts
        if setting in ("contexts", "both"):
            for gpu in others:
                for _ in range(2):
                    background.append(subprocess.Popen(
                        [sys.executable, "-c", f"import bench.driver_contention as d; d._contexts('{gpu}', {stop_at})"],
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}))
        if setting in ("draws", "both"):
            for gpu in others:
                background.append(subprocess.Popen(
                    [sys.executable, __file__, "--child", "--seconds", str(args.seconds + 4 + 3 * args.contexts),
                     "--mb", str(args.mb)],
                    env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu}))
        time.sleep(3.0 if background else 0.0)  # the background under way
        steps = probe(args.seconds, args.mb)
        contexts = context_seconds(args.contexts)
        for p in background:
            p.wait()
        total = statistics.median(steps["total"])
        first = first or total
        cells = ", ".join(f"{k} {statistics.median(v):.2f}/{sorted(v)[int(0.9 * (len(v) - 1))]:.2f}"
                          for k, v in steps.items())
        made = f"{statistics.median(contexts):.3f} s (of {len(contexts)})" if contexts else "-"
        print(f"{setting:9s} n={len(steps['total']):4d}  {cells}  (median/p90 ms)  total x{total / first:.2f}; "
              f"a fresh process's CUDA context: {made}", flush=True)


if __name__ == "__main__":
    main()
