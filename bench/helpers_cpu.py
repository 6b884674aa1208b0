"""Helpers a solution starts (processes in a session or group of their own, orphans, threads) on the CPU, run after
run: issue 40's rule is that none is ever `correct` above 1.05x eager.

    python bench/helpers_cpu.py [--runs 5] [--max-time 1]

Each run is one `kbench run --device cpu` of the `timed` fixture problem (tests/fixtures/problems/timed) with the
fixtures below and an honest copy; per fixture and run it prints the status, the speedup vs eager and the flags, then
whether the rule held.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HELPERS = ("honest_copy", "escapes_by_session", "escapes_as_orphan", "helper_in_group", "spins_while_frozen",
           "busy_thread", "busy_python_thread")
LIMIT = 1.05


def one_run(work: Path, max_time: float) -> dict[str, dict]:
    solutions = work / "solutions" / "timed"
    solutions.mkdir(parents=True, exist_ok=True)
    for name in HELPERS:
        shutil.copy(FIXTURES / "adversarial" / "timed" / f"{name}.py", solutions / f"{name}.py")
    results = work / "results"
    subprocess.run([sys.executable, "-m", "kbench", "run", "-p", "timed", "--problems-dir", str(FIXTURES / "problems"),
                    "--solutions-dir", str(work / "solutions"), "--device", "cpu", "--trials", "3",
                    "--no-compile-baseline", "--max-time", str(max_time), "--results-dir", str(results),
                    "--no-progress"], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    run = max(results.glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return {e["solution"]: e for e in json.loads(run.read_text())["evaluations"] if e["solution"] in HELPERS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-time", type=float, default=1.0)
    args = parser.parse_args()
    broken = []
    seen: dict[str, list[str]] = {name: [] for name in HELPERS}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.runs):
            rows = one_run(Path(scratch) / str(index), args.max_time)
            for name in HELPERS:
                e = rows.get(name, {})
                speedup = e.get("speedup_vs_eager") or (e.get("withheld") or {}).get("speedup_vs_eager")
                flags = ",".join(sorted({w.get("code", "") for w in e.get("warnings", [])}))
                cell = f"{e.get('status', '?')} {speedup:.2f}x" if speedup else e.get("status", "?")
                seen[name].append(f"{cell} [{flags}]" if flags else cell)
                if name != "honest_copy" and e.get("status") == "correct" and speedup and speedup > LIMIT:
                    broken.append(f"{name} run {index + 1}: correct at {speedup:.2f}x")
            print(f"run {index + 1} done", flush=True)
    for name, cells in seen.items():
        print(f"{name:20} " + " | ".join(cells))
    print("rule held: never correct above 1.05x" if not broken else "rule broken: " + "; ".join(broken))


if __name__ == "__main__":
    main()
