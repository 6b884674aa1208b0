"""How many timed samples a CPU call gets within --max-time, and where a round's time goes.

    python bench/cpu_samples.py [--max-time 3] [--targets 10,50,100] [--work /tmp/cpu_samples]

Writes KernelBench-format problems of two kinds whose eager call takes about each target in milliseconds on this
machine (sized by timing the call here first):
- `mm_<ms>`: a matrix product (small inputs and output, the call is compute);
- `ew_<ms>`: element-wise work on a large tensor (inputs and output as large as the call is long: a round's input
  refresh and its full output comparison are as large as they get).
Each gets an honest copy (the problem's source and `class ModelNew(Model): pass`); then one `kbench run --device cpu --size full
--no-compile-baseline --max-time T` over them all, and per row: the eager call's median ms, the timed samples, why
sampling stopped, the timing phase's seconds, and the protocol's seconds per round spent refreshing inputs and
rechecking outputs (run.json's diagnostics.protocol). The issue's goal: at least 10 samples for calls up to 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MM = '''import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''

EW = '''import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.tanh(x) * y + x


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
'''

HONEST = '\n\nDEVICES = ("cpu", "cuda")\n\n\nclass ModelNew(Model):\n    pass\n'  # after the problem's source


def call_ms(kind: str, n: int) -> float:
    import torch

    if kind == "mm":
        a, b = torch.randn(n, n), torch.randn(n, n)
        fn = lambda: torch.relu(a @ b)  # noqa: E731
    else:
        x, y = torch.randn(n), torch.randn(n)
        fn = lambda: torch.tanh(x) * y + x  # noqa: E731
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[1] * 1e3


def size_for(kind: str, target_ms: float) -> int:
    """The size whose call takes about target_ms here (mm: the cube of the side scales the work; ew: linear)."""
    n = 512 if kind == "mm" else 1 << 22
    for _ in range(4):
        ms = call_ms(kind, n)
        scale = target_ms / ms
        n = int(n * (scale ** (1 / 3) if kind == "mm" else scale))
    return n


def write(work: Path, targets: list[int]) -> None:
    for kind, template in (("mm", MM), ("ew", EW)):
        for target in targets:
            n = size_for(kind, target)
            folder = work / "problems" / f"{kind}_{target:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "model.py").write_text(template.format(n=n))
            solutions = work / "solutions" / f"{kind}_{target:03d}"
            solutions.mkdir(parents=True, exist_ok=True)
            (solutions / "honest.py").write_text(template.format(n=n) + HONEST)
            print(f"{kind}_{target:03d}: N={n}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-time", type=float, default=3.0)
    parser.add_argument("--targets", default="10,50,100")
    parser.add_argument("--work", default="/tmp/cpu_samples")
    args = parser.parse_args()
    work = Path(args.work)
    targets = [int(t) for t in args.targets.split(",")]
    if not (work / "problems").exists():
        write(work, targets)
    results = work / "results"
    command = [sys.executable, "-m", "kbench", "run", "--device", "cpu", "--size", "full", "--no-compile-baseline",
               "--max-time", str(args.max_time), "--problems-dir", str(work / "problems"),
               "--solutions-dir", str(work / "solutions"), "--results-dir", str(results), "--jobs", "1"]
    started = time.monotonic()
    subprocess.run(command, check=False, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
                   stdout=subprocess.DEVNULL)
    print(f"kbench run: {time.monotonic() - started:.1f} s")
    run = max(results.glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    doc = json.loads(run.read_text())
    print(f"{'problem':10} {'eager ms':>9} {'status':>8} {'samples':>8} {'stop':>10} {'timing s':>9} "
          f"{'refresh/rd':>11} {'recheck/rd':>11}")
    for row in sorted(doc["evaluations"], key=lambda e: e["problem"]):
        if row["solution"] == "eager":
            continue
        timing = row.get("timing") or {}
        protocol = (row.get("diagnostics") or {}).get("protocol") or {}
        rounds = max(protocol.get("rounds") or 0, 1)
        samples = len(timing.get("samples") or [])
        base_ms = ((row.get("eager_timing") or {}).get("median") or float("nan")) * 1e3
        print(f"{row['problem']:10} {base_ms:9.2f} {row['status']:>8} {samples:8d} "
              f"{timing.get('stop_reason', ''):>10} {(row.get('phases') or {}).get('timing', 0.0):9.2f} "
              f"{protocol.get('refresh_s', 0.0) / rounds:11.3f} {protocol.get('recheck_s', 0.0) / rounds:11.3f}")


if __name__ == "__main__":
    main()
