"""What keeping a run's results costs its parent: N rows begun and added to a RunStore, as a run does.

    python bench/run_store.py [--rows 200] [--samples 60 200]

Each row is a correct evaluation with `--samples` raw samples in each of its timing arrays (samples, host, judge and
issue samples, for the solution and for the eager beside it) and as many verification times: about what a GPU-regime
row of a KernelBench suite keeps. It prints, per sample count, the seconds the `begin` and `add` calls took in all,
and the size of run.json and of the journal when the last row is in, then after `finish`, and the seconds
`load_run` takes to read it back (every report and compare starts there).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbench.results.diagnostics import Diagnostics, TimingProtocol
from kbench.results.records import Evaluation, Measurement, Status, TrialResult
from kbench.results.storage import JOURNAL_FILE, RUN_FILE, RunStore, load_run


def _measurement(n: int) -> Measurement:
    samples = tuple(random.random() * 1e-3 for _ in range(n))
    return Measurement(samples, samples, "converged", samples, samples, "gpu")


def _row(i: int, n: int) -> Evaluation:
    return Evaluation(problem=f"p{i}", solution="honest", status=Status.CORRECT, device="cuda", size="full",
                      trials=tuple(TrialResult(seed=j, passed=True, max_abs_err=1e-5) for j in range(5)),
                      timing=_measurement(n), eager_timing=_measurement(n),
                      diagnostics=Diagnostics(protocol=TimingProtocol(verify_s=tuple(random.random() for _ in range(n)))))


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB" if path.exists() else "none"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--samples", type=int, nargs="+", default=[60, 200])
    args = parser.parse_args(argv)
    for n in args.samples:
        rows = [_row(i, n) for i in range(args.rows)]
        store = RunStore.create(Path(tempfile.mkdtemp()), {"selection": {}})
        start = time.perf_counter()
        for row in rows:
            store.begin(row.problem, row.solution)
            store.add(row)
        seconds = time.perf_counter() - start
        during = f"run.json {_size(store.directory / RUN_FILE)}, journal {_size(store.directory / JOURNAL_FILE)}"
        store.finish()
        start = time.perf_counter()
        _, loaded = load_run(store.directory / RUN_FILE)
        read = time.perf_counter() - start
        print(f"{n} samples per array: {args.rows} rows begun and added in {seconds:.1f} s ({during}); after finish "
              f"run.json {_size(store.directory / RUN_FILE)}, read back ({len(loaded)} rows) in {read:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
