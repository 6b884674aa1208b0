"""Candidates evaluated per hour: N distinct copies of one solution, built cold, then run.

Each copy gets a unique comment line, so each has its own source hash and its own extension build: that is what N
different LLM candidates cost. Two phases, each one or more separate `kbench` processes:

1. cold_build: `kbench build` of all N candidates with an empty build cache (one compile per candidate),
2. run:        `kbench run` on the now warm cache: its cache check, the reference once, then N evaluations (one per
               visible GPU at a time).

Warm throughput (every candidate already compiled, e.g. re-evaluating a batch) is N / run; cold throughput (new
candidates, compiled first) is N / (cold_build + run). The figures also give the mean seconds of each part of a
candidate's evaluation (kbench's `phases`; "rest" is what the child spent outside them, e.g. exiting).

A phase that does not finish within --budget seconds of this invocation is interrupted (SIGTERM: kbench saves an
interrupted run), and the next invocation with the same --work resumes it with `kbench run --resume`, adding up the
wall time. So the measurement can span several calls that each have a time limit:

    python bench/throughput.py --problem conv3d_logsumexp --count 50 --work build/tp --budget 540
    python bench/throughput.py --work build/tp --budget 540      # again until it prints "done"

Extra `kbench run` options go after `--` on the first invocation (e.g. `-- --max-time 2 --trials 3`).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("cold_build", "run")


def make_candidates(template: Path, problem: str, count: int, solutions_dir: Path) -> None:
    folder = solutions_dir / problem
    folder.mkdir(parents=True, exist_ok=True)
    source = template.read_text()
    for i in range(count):
        (folder / f"cand_{i:03d}.py").write_text(f"# throughput candidate {i}\n{source}")


def timed(command: list[str], log: Path, deadline: float) -> tuple[float, bool]:
    """Run until done or the deadline (then SIGTERM, as a batch scheduler would); (seconds, finished)."""
    started = time.perf_counter()
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            code = child.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)
            code = child.wait()
            return time.perf_counter() - started, False
    if code != 0:
        sys.exit(f"{' '.join(command)} exited {code}; see {log}")
    return time.perf_counter() - started, True


def run_id(results: Path) -> str | None:
    runs = sorted(p.parent.name for p in results.glob("*/run.json"))
    return runs[-1] if runs else None


def _run_file(path: Path) -> dict:
    """A run.json as the current version has it (older files migrated: kbench.results.migrate)."""
    from kbench.results import migrate, storage

    return migrate.upgrade(json.loads(path.read_text()), storage.VERSION)


def figures(state: dict, work: Path) -> dict:
    document = _run_file(work / "run" / state["run_id"] / "run.json")
    rows = [r for r in document["evaluations"] if r["solution"].startswith("cand_")]
    gpu = document["environment"].get("gpu") or {}
    seconds = state["seconds"]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    phases: dict[str, float] = {}
    timed_rows = [r for r in rows if r.get("phases")]
    for row in timed_rows:
        parts = row["phases"]
        for name, spent in {**parts, "rest": row["seconds"] - sum(parts.values())}.items():
            phases[name] = phases.get(name, 0.0) + spent / len(timed_rows)
    return {
        "problem": state["problem"], "candidates": state["count"], "run_args": state["run_args"],
        "mean_evaluation_phases_s": {name: round(spent, 2) for name, spent in phases.items()},
        "mean_evaluation_s": round(sum(r["seconds"] for r in rows) / max(len(rows), 1), 2),
        "evaluated": len(rows), "statuses": statuses,
        "gpu": gpu.get("name", "none"), "gpus": gpu.get("count", 0), "cpu_count": document["environment"].get("cpu_count"),
        "gpus_used": sorted({r.get("gpu") for r in rows} - {None}),
        **{f"{phase}_s": round(seconds[phase], 1) for phase in PHASES},
        "cold_candidates_per_hour": round(len(rows) * 3600 / (seconds["cold_build"] + seconds["run"])),
        "warm_candidates_per_hour": round(len(rows) * 3600 / seconds["run"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="conv3d_logsumexp")
    parser.add_argument("--template", default="cuda_fused", help="solution of --problem to copy")
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--work", type=Path, required=True, help="scratch folder; its state.json carries progress")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds this invocation may spend")
    parser.add_argument("run_args", nargs="*", help="extra `kbench run` options, after --")
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget

    state_file = args.work / "state.json"
    if state_file.exists():
        state = json.loads(state_file.read_text())
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        make_candidates(ROOT / "solutions" / args.problem / f"{args.template}.py", args.problem, args.count,
                        args.work / "solutions")
        state = {"problem": args.problem, "count": args.count, "run_args": args.run_args,
                 "done": [], "seconds": {p: 0.0 for p in PHASES}}

    def save() -> None:
        state_file.write_text(json.dumps(state, indent=2))

    kbench = [sys.executable, "-m", "kbench"]
    common = ["-p", state["problem"], "--solutions-dir", str(args.work / "solutions"), "--cache-dir",
              str(args.work / "cache")]
    for phase in PHASES:
        if phase in state["done"]:
            continue
        if phase == "cold_build":
            command = [*kbench, "build", *common]
        elif "run_id" in state:
            command = [*kbench, "run", "--resume", state["run_id"], "--results-dir", str(args.work / phase)]
        else:
            command = [*kbench, "run", *common, "--results-dir", str(args.work / phase), *state["run_args"]]
        print(f"{phase}: {' '.join(command[2:])}", flush=True)
        seconds, finished = timed(command, args.work / f"{phase}.log", deadline)
        state["seconds"][phase] += seconds
        if phase == "run" and run_id(args.work / phase):
            state["run_id"] = run_id(args.work / phase)
        if finished:
            state["done"].append(phase)
        save()
        if not finished:
            print(f"{phase}: interrupted at the budget after {seconds:.0f} s; run again with --work {args.work}")
            return
    result = figures(state, args.work)
    (args.work / "throughput.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print("done")


if __name__ == "__main__":
    main()
