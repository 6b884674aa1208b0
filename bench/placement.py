"""Does where a process's threads run, or where it made its CUDA context, move a launch-bound call's time?

    python bench/placement.py [VARIANT ...]      # default: every variant; each run twice, in a fresh process

The call: the tiny fixture problem's forward and backward as `--backward` times it (bench/fidelity.py's model with
`backward`: kbench.judge.backward.Gradients, about 0.3-0.6 ms of small kernels on an H100), timed by kbench's
host-regime timer (synchronize, L2 flush, events around the call), 200 samples after 30 calls of warm-up, in one
plain process per variant:

    free                nothing pinned
    pin_first           the process pinned to the timing core (the last allowed core) before CUDA starts
    pin_main_after_cuda CUDA started first, then only the main thread pinned (a candidate's placement before
                        kbench.system.cores.pin reached every thread)
    pin_all_after_cuda  CUDA started first, then every thread pinned (system.cores.pin)
    pin_all_after_warm  the warm-up run unpinned, then every thread pinned (autograd's device thread started)
    init_on_C           the CUDA context made with the main thread on core C, then every thread pinned to the timing
                        core (C in 0, the middle core, the one before the timing core, the timing core)

Prints one line per run: the variant, the median event time and host time in ms, and each thread's allowed cores.
Needs a GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES, WARMUP = 200, 30


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def variants() -> list[str]:
    cores = _cores()
    starts = sorted({cores[0], cores[len(cores) // 2], cores[-2] if len(cores) > 1 else cores[0], cores[-1]})
    return ["free", "pin_first", "pin_main_after_cuda", "pin_all_after_cuda", "pin_all_after_warm",
            *(f"init_on_{c}" for c in starts)]


def child(variant: str) -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    import torch

    from bench.fidelity import _model
    from kbench.system.cores import pin
    from kbench.judge.timing.timers import CudaEventTimer

    everywhere, core = set(_cores()), _cores()[-1]
    if variant == "pin_first":
        pin(0, core)
    elif variant == "pin_main_after_cuda":
        torch.zeros(1, device="cuda")
        os.sched_setaffinity(0, {core})
    elif variant == "pin_all_after_cuda":
        torch.zeros(1, device="cuda")
        pin(0, core)
    elif variant.startswith("init_on_"):
        os.sched_setaffinity(0, {int(variant.removeprefix("init_on_"))})
        torch.zeros(1, device="cuda")
        os.sched_setaffinity(0, everywhere)
        pin(0, core)
    call, inputs = _model("tiny", None, "", backward=True, problems=str(ROOT / "tests" / "fixtures" / "problems"))
    for _ in range(WARMUP):
        call(*inputs)
    torch.cuda.synchronize()
    if variant == "pin_all_after_warm":
        pin(0, core)
    timer = CudaEventTimer(torch.device("cuda"), regime="host")
    samples = [timer.sample(lambda: call(*inputs)) for _ in range(SAMPLES)]
    threads = {}
    for task in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{task}/comm").read_text().strip()
            threads[f"{task}:{name}"] = sorted(os.sched_getaffinity(int(task)))
        except OSError:
            continue
    return {"variant": variant, "event_ms": statistics.median(s[0] for s in samples) * 1e3,
            "host_ms": statistics.median(s[1] for s in samples) * 1e3,
            "placements": sorted({_span(c) for c in threads.values()})}


def _span(cores: list[int]) -> str:
    return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print("RESULT", json.dumps(child(sys.argv[2])), flush=True)
        return
    chosen = sys.argv[1:] or variants()
    for _ in range(2):
        for variant in chosen:
            done = subprocess.run([sys.executable, __file__, "--child", variant], capture_output=True, text=True,
                                  timeout=300, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                print(f"{variant:22s} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}", flush=True)
                continue
            row = json.loads(lines[-1][len("RESULT "):])
            print(f"{variant:22s} event {row['event_ms']:7.3f} ms  host {row['host_ms']:7.3f} ms  "
                  f"threads on {', '.join(row['placements'])}", flush=True)


if __name__ == "__main__":
    main()
