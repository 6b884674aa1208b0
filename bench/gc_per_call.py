"""How much work one --backward call of the tiny fixtures leaves for Python's garbage collector, which kbench turns off
inside the timed interval (kbench.judge.timing.timers.no_collection): objects added to generation 0 per call, and what a
generation-0 collection after CALLS calls costs. On the CPU, where autograd runs in the calling thread.

    python bench/gc_per_call.py
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbench.judge.backward import Gradients  # noqa: E402
from kbench.judge.candidate.loading import import_path  # noqa: E402

CALLS = 200
PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "tiny" / "model.py"
FIXTURES = ROOT / "tests" / "fixtures" / "backward" / "tiny"


def _models(problem):
    torch.manual_seed(0)
    reference = problem.Model(*problem.get_init_inputs())
    yield "reference", Gradients(reference, reference=True)
    for name in ("honest_copy", "honest_function"):
        model = import_path(f"gc_{name}", str(FIXTURES / f"{name}.py")).ModelNew(*problem.get_init_inputs())
        model.load_state_dict(reference.state_dict())
        yield name, Gradients(model, ("linear.weight", "linear.bias"))


def main() -> None:
    problem = import_path("gc_tiny", str(PROBLEM))
    x, upstream = problem.get_inputs()[0], torch.randn(problem.batch_size, problem.features)
    for name, model in _models(problem):
        for _ in range(10):
            model(x, upstream)
        gc.collect()
        gc.disable()
        before, start = gc.get_count()[0], time.perf_counter()
        for _ in range(CALLS):
            model(x, upstream)
        call_s, added = (time.perf_counter() - start) / CALLS, gc.get_count()[0] - before
        gc.enable()
        start = time.perf_counter()
        gc.collect(0)
        print(f"{name:16s} call {call_s * 1e6:7.1f} us   objects per call {added / CALLS:5.2f}   "
              f"a generation-0 collection after {CALLS} calls {(time.perf_counter() - start) * 1e6:6.1f} us")


if __name__ == "__main__":
    main()
