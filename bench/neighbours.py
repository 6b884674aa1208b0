"""Which neighbours slow a timed call's GPU time: other processes' start-up, memory churn and exits, on the same GPU
and on the host's other GPUs.

    python bench/neighbours.py [--seconds 6]

On four H200s of one host, level 2's honest rows had single slow samples, 7-20% above the rest of their memory draw
(kbench.judge.timing.placement), far more often than on one GPU (2026-11-28, thirty-first session, docs/benchmarks.md):
29 of 83 drawn rows drew on past the first draws against 6 of 90. Those times are the GPU's own (CUDA events around
gated calls), so something reaches the GPU's work itself. This times two calls on GPU 0 in a loop, each behind a
spin on the GPU (so the events see the GPU's work only, as behind kbench's gate), synchronized and a couple of
milliseconds apart as kbench's rounds are (a 4096 x 4096 float32 matrix product without TF32, and an
add over 1 GiB), in one setting after another:

  alone          nothing else on the machine
  bare-same      two loops of fresh Python processes on GPU 0 that make a CUDA context and one tiny kernel, and exit
  start-same     two loops of fresh Python processes on GPU 0 that make a CUDA context, a first small convolution and
                 matrix product, and exit (kbench's workers and candidate processes started ahead: warm_cuda)
  start-others   the same on every other GPU
  churn-same     a process on GPU 0 that hands its cached memory back and allocates and fills 1 GiB, over and over (a
                 memory draw, kbench.judge.timing.placement.MemoryDraw)
  exit-same      a loop of processes on GPU 0 that allocate and fill 4 GiB and exit (a worker's exit)
  churn-others   the churn on every other GPU
  busy-others    a matrix-product loop on every other GPU (the other slots' timed calls)
  alone-again    nothing, again

and prints, per setting and call, the median over the alone one's, the 99th percentile over it, and the share of
samples more than 5% above the alone median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A CUDA context and cuDNN's and cuBLAS's first calls, as kbench.judge.candidate.candidate.warm_cuda makes them in a
# worker or candidate started ahead
BARE = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"  # a CUDA context and one tiny kernel
CONTEXT = ("import torch; x = torch.ones(1, 2, 6, 6, device='cuda'); "
           "torch.nn.functional.conv2d(x, torch.ones(2, 2, 3, 3, device='cuda')); "
           "a = torch.ones(16, 16, device='cuda'); torch.mm(a, a); torch.cuda.synchronize()")
EXIT = "import torch; x = torch.ones(1 << 30, device='cuda'); torch.cuda.synchronize()"
SLOW = 1.05  # a sample this far above the alone median counts as slow
GAP_S = 2e-3  # the host's pause between two timed calls (a round's protocol)
# A spin of about half a millisecond queued ahead of each timed call, as kbench's gate holds a GPU-regime call: the
# events time the GPU's work alone, never the host's issuing (which other processes' driver calls slow down)
GATE_CYCLES = 1_000_000


def churn(stop_at: float) -> None:
    """Hand the cached memory back, allocate and fill 1 GiB, until `stop_at` (time.monotonic)."""
    import torch

    while time.monotonic() < stop_at:
        torch.cuda.empty_cache()
        x = torch.empty(1 << 28, device="cuda")
        x.fill_(1.0)
        torch.cuda.synchronize()
        del x


def busy(stop_at: float) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(4096, 4096, device="cuda")
    while time.monotonic() < stop_at:
        a @ a
        torch.cuda.synchronize()


def loop(code: str, stop_at: float) -> None:
    """Fresh processes running `code`, one after another, until `stop_at`."""
    while time.monotonic() < stop_at:
        subprocess.run([sys.executable, "-c", code], check=False)


def _background(what: str, gpu: str, stop_at: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import bench.neighbours as n; n.{what}"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "CUDA_VISIBLE_DEVICES": gpu,
                                           "KBENCH_NEIGHBOUR_STOP": str(stop_at)})


def timed(seconds: float) -> dict[str, list[float]]:
    """The two calls' GPU times (ms), alternately, for `seconds`."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(4096, 4096, device="cuda")
    x, y = torch.randn(1 << 28, device="cuda"), torch.randn(1 << 28, device="cuda")
    calls = {"matmul": lambda: a @ a, "add 1 GiB": lambda: x + y}
    found: dict[str, list[float]] = {name: [] for name in calls}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for name, call in calls.items():
            torch.cuda._sleep(GATE_CYCLES)  # the GPU busy while the host queues the events and the call
            start.record()
            call()
            end.record()
            end.synchronize()
            found[name].append(start.elapsed_time(end))
            pause = time.perf_counter() + GAP_S
            while time.perf_counter() < pause:
                pass
    return found


SETTINGS = {
    "alone": [],
    "bare-same": [("loop(n.BARE, STOP)", "same"), ("loop(n.BARE, STOP)", "same")],
    "start-same": [("loop(n.CONTEXT, STOP)", "same"), ("loop(n.CONTEXT, STOP)", "same")],
    "start-others": [("loop(n.CONTEXT, STOP)", "others"), ("loop(n.CONTEXT, STOP)", "others")],
    "churn-same": [("churn(STOP)", "same")],
    "exit-same": [("loop(n.EXIT, STOP)", "same")],
    "churn-others": [("churn(STOP)", "others")],
    "busy-others": [("busy(STOP)", "others")],
    "alone-again": [],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds of timed calls per setting")
    args = parser.parse_args()
    import torch

    gpus = [str(i) for i in range(torch.cuda.device_count())]
    print(f"{torch.cuda.get_device_name(0)} x{len(gpus)}, torch {torch.__version__}, {os.cpu_count()} cores; GPU 0 "
          f"timed, {args.seconds:.0f} s a setting", flush=True)
    timed(1.0)  # warm: libraries and clocks
    base: dict[str, float] = {}
    for setting, jobs in SETTINGS.items():
        targets = [(what, gpu) for what, where in jobs for gpu in (["0"] if where == "same" else gpus[1:])]
        if jobs and not targets:
            continue
        stop_at = time.monotonic() + args.seconds + 3.0
        started = [_background(what.replace("STOP", "float(__import__('os').environ['KBENCH_NEIGHBOUR_STOP'])"),
                               gpu, stop_at) for what, gpu in targets]
        time.sleep(2.0 if started else 0.0)  # the neighbours under way
        found = timed(args.seconds)
        for p in started:
            p.wait()
        cells = []
        for name, values in found.items():
            ordered = sorted(values)
            base.setdefault(name, statistics.median(values))
            ref = base[name]
            slow = sum(1 for v in values if v > SLOW * ref) / len(values)
            cells.append(f"{name}: {statistics.median(values):.3f} ms x{statistics.median(values) / ref:.3f}, "
                         f"p99 x{ordered[int(0.99 * (len(ordered) - 1))] / ref:.3f}, slow {100 * slow:.1f}% "
                         f"(n {len(values)})")
        print(f"{setting:13s} " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
