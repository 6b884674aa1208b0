"""Suites at scale: evaluations an hour on one GPU and on several, per-phase medians, and where honest copies read.

    python bench/scale.py KB/KernelBench WORK --level 2 --gpus 0 --gpus 0,1,2,3
    python bench/scale.py KB/KernelBench WORK --level 2 --only 77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool \\
        --copies 4 --gpus 0,1,2,3 --label four-copies
    python bench/scale.py KB/KernelBench WORK --table          # the tables of every run WORK holds, nothing run
    python bench/scale.py KB/KernelBench WORK --gpus 0 -- --max-time 3    # kbench run's own options after --

It copies the chosen KernelBench problem files into WORK/problems and writes, for each, `--copies` honest solutions
(the problem's own code with `class ModelNew(Model): pass`) into WORK/solutions. Then, for each `--gpus` set in
turn, one `kbench run` over the whole folder (`--no-compile-baseline --no-progress`, and what follows `--`) with
CUDA_VISIBLE_DEVICES set to the set, timed on the wall clock. Each run keeps its folder (WORK/runs/<label>) and a
`done` marker: an invocation skips the runs that are done and resumes one cut short (`--budget` seconds, after which
kbench gets SIGTERM and saves what it has; the next invocation goes on with `kbench run --resume`, adding up the wall
time), so the measurement can span several calls that each have a time limit. Nothing of KernelBench is stored in
this repository; point it at a checkout.

It prints, per run: the GPU model and how many were used, the evaluations and their wall time, evaluations an hour,
per-phase medians of the honest rows and of the eager rows, where the honest copies read against the eager beside
them (range, median, how many outside 1.00 +- 0.03, by timing regime), the verdicts, how many rows needed a fresh
candidate process or ended `[processes_disagree]` or `[processes_unchecked]`, and how many ended with a side stuck at
the other's slow memory (kbench.judge.timing.placement.stuck); the kbench process's own CPU time (one Python process
whose threads serve every slot); where the timing phase went (diagnostics.protocol.spent) and where each GPU's wall went between
turns (the slot timeline, with its workers' start); then each run's rate over the first run's (the 4-vs-1 ratio), and
with `--rows`, one line per honest row (its GPU, the judge's eager, the candidate's time, the process check, the
memory draws each side kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HONEST = ('\n\nDEVICES = ("cuda", "cpu")\n\n\nclass ModelNew(Model):\n'
          '    """An honest solution: the reference itself."""\n')
BAND = 0.03  # an honest copy reads within 1.00 +- BAND (issue: suites at scale)
PHASES = ("setup", "calibration_start", "calibration", "load", "build", "trials", "other_sizes", "timing",
          "trust_determinism", "trust_profile", "trust_fp64")
EAGER_PHASES = ("setup", "timing", "degenerate_check", "noise_check", "floor")
REFERENCE_ROWS = ("eager", "torch.compile")


# With --probe-kernels, each honest copy declares a CUDA kernel it never builds: kbench's kernel profile then runs in
# its candidate process after the timing and records the five busiest kernels of a call there (run.json's `kernels`).
PROBE = '\n_PROBE = "__global__ void scale_probe() {}"  # declared, never built: the kernel profile runs\n'


def prepare(kernelbench: Path, work: Path, level: int, only: list[str], first: int | None, copies: int,
            probe: bool = False) -> int:
    """Problem files and honest copies into WORK (rewritten each time: they are cheap and must match the options)."""
    folder = kernelbench / f"level{level}"
    files = sorted(folder.glob("*.py"), key=lambda p: (int(p.stem.split("_")[0]) if p.stem[0].isdigit() else 0, p.stem))
    if only:
        files = [p for p in files if p.stem in only or p.stem.split("_")[0] in only]
    if first is not None:
        files = files[:first]
    if not files:
        raise SystemExit(f"no level-{level} problem files chosen under {folder}: is {kernelbench} a KernelBench "
                         "checkout's KernelBench/ folder?")
    for sub in ("problems", "solutions"):
        shutil.rmtree(work / sub, ignore_errors=True)
    (work / "problems").mkdir(parents=True)
    for source in files:
        stem = f"L{level}_{source.stem}"
        shutil.copyfile(source, work / "problems" / f"{stem}.py")
        (work / "solutions" / stem).mkdir(parents=True)
        for copy in range(copies):
            name = "honest" if copy == 0 else f"honest_{copy + 1}"
            text = source.read_text() + HONEST + (PROBE if probe else "")
            (work / "solutions" / stem / f"{name}.py").write_text(text)
    return len(files)


def _label(gpus: str, repeat: int) -> str:
    return f"gpus-{gpus.replace(',', '')}" + (f"-r{repeat + 1}" if repeat else "")


def _run_dir(folder: Path) -> Path | None:
    runs = sorted(p.parent for p in folder.glob("*/run.json"))
    return runs[-1] if runs else None


def run_set(work: Path, label: str, gpus: str, extra: list[str], deadline: float) -> bool:
    """One `kbench run` of the whole folder on `gpus`, resumed if an earlier invocation was cut short; True once
    done."""
    folder = work / "runs" / label
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "done").exists():
        return True
    state_file = folder / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"gpus": gpus, "seconds": 0.0,
                                                                              "extra": extra}
    kbench = [sys.executable, "-m", "kbench", "run"]
    previous = _run_dir(folder / "results")
    if previous is not None:
        command = [*kbench, "--resume", previous.name, "--results-dir", str(folder / "results"), "--no-progress"]
    else:
        command = [*kbench, "--problems-dir", str(work / "problems"), "--solutions-dir", str(work / "solutions"),
                   "--no-compile-baseline", "--no-progress", "--results-dir", str(folder / "results"),
                   *state["extra"]]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus, "PYTHONPATH": path,
           "KBENCH_TIMELINE": str(folder / "timeline.jsonl")}
    print(f"{label}: CUDA_VISIBLE_DEVICES={gpus} {' '.join(command[2:])}", flush=True)
    started = time.perf_counter()
    with (folder / "kbench.log").open("a") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        cpu_s = 0.0  # the kbench process's own CPU seconds (its threads; not its workers), read while it runs
        finished = False
        while not finished:
            try:
                child.wait(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
                finished = True
            except subprocess.TimeoutExpired:
                cpu_s = _own_cpu_s(child.pid) or cpu_s
                if time.monotonic() >= deadline:
                    child.send_signal(signal.SIGTERM)
                    child.wait()
                    break
    state["seconds"] += time.perf_counter() - started
    state["parent_cpu_s"] = state.get("parent_cpu_s", 0.0) + cpu_s
    state_file.write_text(json.dumps(state, indent=1))
    if finished and _run_dir(folder / "results") is not None:
        (folder / "done").write_text("")
        return True
    print(f"{label}: cut short at the budget after {state['seconds']:.0f} s; run again to go on", flush=True)
    return False


def _own_cpu_s(pid: int) -> float | None:
    """A process's own CPU seconds so far (kbench.system.procfs: user and system, every thread), None once gone."""
    sys.path.insert(0, str(ROOT))
    from kbench.system.procfs import read

    found = read(pid)
    return found.cpu_s if found is not None else None


def _load(run_dir: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from kbench.results.storage import load_run

    doc, _ = load_run(run_dir)
    return doc


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def figures(folder: Path) -> dict:
    """What one run of the bench measured (its run.json and its wall time)."""
    state = json.loads((folder / "state.json").read_text())
    doc = _load(_run_dir(folder / "results"))
    rows = doc["evaluations"]
    honest = [r for r in rows if r["solution"] not in REFERENCE_ROWS]
    eager = [r for r in rows if r["solution"] == "eager"]
    ran = [r for r in honest if r.get("phases")]
    gpu = doc["environment"].get("gpu") or {}
    speedups = [r["speedup_vs_eager"] for r in honest if r.get("speedup_vs_eager")]
    by_regime: dict[str, list[float]] = {}
    for r in honest:
        if r.get("speedup_vs_eager") and r.get("timing"):
            by_regime.setdefault(r["timing"].get("regime") or "?", []).append(r["speedup_vs_eager"])
    statuses: dict[str, int] = {}
    for r in honest:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    fresh = [((r.get("diagnostics") or {}).get("processes") or {}).get("fresh_candidates", 0) for r in honest]
    codes = [w["code"] for r in honest for w in r.get("warnings", [])]
    drawn = [d for r in honest if (d := ((r.get("diagnostics") or {}).get("protocol") or {}).get("placements"))]
    return {
        "label": folder.name, "gpu": gpu.get("name", "none"), "gpus": len(state["gpus"].split(",")),
        "gpus_used": sorted({r.get("gpu") for r in rows} - {None}),
        "evaluations": len(rows), "wall_s": round(state["seconds"], 1),
        "per_hour": round(len(rows) * 3600 / state["seconds"]) if state["seconds"] else None,
        "parent_cpu_s": state.get("parent_cpu_s"),
        "honest_s": _median([r["seconds"] for r in ran]), "eager_s": _median([r["seconds"] for r in eager]),
        "phases": {p: _median([(r.get("phases") or {}).get(p, 0.0) for r in ran]) for p in PHASES},
        "eager_phases": {p: _median([(r.get("phases") or {}).get(p, 0.0) for r in eager]) for p in EAGER_PHASES},
        # what lies outside the child's own phases: its start (unless started ahead), its exit, the result's way back
        "honest_rest": _median([r["seconds"] - sum((r.get("phases") or {}).values()) for r in ran]),
        "eager_rest": _median([r["seconds"] - sum((r.get("phases") or {}).values()) for r in eager]),
        "speedups": (min(speedups), statistics.median(speedups), max(speedups)) if speedups else None,
        "outside": sum(abs(s - 1) > BAND for s in speedups),
        "regimes": {k: (len(v), statistics.median(v)) for k, v in sorted(by_regime.items())},
        "statuses": statuses, "fresh_candidates": sum(1 for f in fresh if f), "disagree": codes.count(
            "processes_disagree"), "unchecked": codes.count("processes_unchecked"),
        # rows whose final rounds had a side stuck at the other's slow memory (placement.stuck; a row timed again in
        # a fresh process keeps the last rounds' figures, so this counts the rows still stuck at the end)
        "stuck": sum(1 for d in drawn if d.get("stuck")),
        # rows that drew their memory (kbench.judge.timing.placement), and those that left a draw out of a side
        "drawn": (len(drawn), sum(1 for d in drawn if d["solution_groups_kept"] < d["groups"]
                                  or d["eager_groups_kept"] < d["groups"])),
        # of the rows that drew on: those whose every group left out was left out on both sides (slow rounds), and
        # those with a group left out of one side only (that side's memory)
        "drew_on": _drew_on(drawn),
        "spent": _spent(ran),
        "slow": _slow_samples(honest),
    }


SLOW_SAMPLE = 1.05  # a timed sample this far above its side's median is a slow one (`_slow_samples`)


def _slow_samples(honest: list[dict]) -> float | None:
    """The share of the honest rows' timed samples (both sides, the ones a memory draw left out too) more than
    SLOW_SAMPLE above their side's median: what the machine did to single calls (bench/neighbours.py)."""
    slow = total = 0
    for r in honest:
        placed = ((r.get("diagnostics") or {}).get("protocol") or {}).get("placements") or {}
        for side, dropped in (("timing", "solution_dropped"), ("eager_timing", "eager_dropped")):
            samples = list((r.get(side) or {}).get("samples") or ()) + list(placed.get(dropped) or ())
            if samples:
                middle = statistics.median(samples)
                slow += sum(1 for t in samples if t > SLOW_SAMPLE * middle)
                total += len(samples)
    return slow / total if total else None


def _drew_on(drawn: list[dict]) -> tuple[int, int, int] | None:
    """Rows that drew past the first draws, those whose left-out groups were the same on both sides, those with a
    group left out of one side only; None where the run file records no groups' places (before 2026-11-28)."""
    sys.path.insert(0, str(ROOT))
    from kbench.judge.timing.placement import PROBE_GROUPS

    on = [d for d in drawn if d.get("draws", 0) > PROBE_GROUPS]
    if not on or any("solution_dropped_groups" not in d for d in on):
        return None
    both = [d for d in on if set(d["solution_dropped_groups"]) == set(d["eager_dropped_groups"])]
    one = [d for d in on if set(d["solution_dropped_groups"]) ^ set(d["eager_dropped_groups"])]
    return len(on), len(both), len(one)


def _spent_fields() -> tuple[str, ...]:
    """diagnostics.protocol.spent's fields (kbench.results.diagnostics.TimingSpend), in their order."""
    sys.path.insert(0, str(ROOT))
    import dataclasses

    from kbench.results.diagnostics import TimingSpend

    return tuple(f.name for f in dataclasses.fields(TimingSpend))


def _spent(ran: list[dict]) -> dict[str, float | None] | None:
    """Median seconds of each part of the timing phase (diagnostics.protocol.spent) and of the samples' own time
    (both sides' timed samples, all rounds kept or not); None where the run file has no such record."""
    fields = _spent_fields()
    spent = [(r, sp) for r in ran if (sp := ((r.get("diagnostics") or {}).get("protocol") or {}).get("spent"))]
    if not spent:
        return None
    found: dict[str, float | None] = {k: _median([sp.get(k, 0.0) for _, sp in spent]) for k in fields}
    found["samples_s"] = _median([sum(r["timing"]["samples"]) + sum(r["eager_timing"]["samples"])
                                  for r, _ in spent if r.get("timing") and r.get("eager_timing")])
    found["timing"] = _median([r["phases"].get("timing", 0.0) for r, _ in spent])
    found["core_mhz"] = _median([mhz for r, _ in spent if (mhz := ((r.get("diagnostics") or {}).get("machine") or {})
                                                               .get("core_mhz"))])
    protocols = [r["diagnostics"]["protocol"] for r, _ in spent]
    found["inputs_s"] = _median([p.get("refresh_s", 0.0) - sp["draws_s"] for p, (_, sp) in zip(protocols, spent)])
    found["recheck_s"] = _median([p.get("recheck_s", 0.0) for p in protocols])
    # the rest of the phase: the machine's watch and the escaped-CPU count around the rounds, the stopping rule
    found["other_s"] = _median([r["phases"].get("timing", 0.0) - p.get("refresh_s", 0.0) - p.get("recheck_s", 0.0)
                                - sum(sp.get(k, 0.0) for k in fields if k not in ("draws_s", "switch_s", "arm_s",
                                                                                  "window_s"))
                                for p, (r, sp) in zip(protocols, spent)])
    return found


def table(work: Path, rows: bool) -> None:
    folders = sorted((p for p in (work / "runs").glob("*") if (p / "state.json").exists() and
                      _run_dir(p / "results") is not None), key=lambda p: p.stat().st_mtime)
    if not folders:
        raise SystemExit(f"no runs under {work / 'runs'}")
    found = [figures(f) for f in folders]
    print("| run | GPU | GPUs | evaluations | wall s | per hour | vs first | honest s | eager s | calibration | load "
          "| trials | timing | trust_fp64 | honest copies (min / median / max) | outside +-3% | by regime | verdicts "
          "| fresh candidate | disagree / unchecked | memory draws (rows / moved / stuck) |")
    print("|" + "---|" * 21)
    base = found[0]["per_hour"]
    for f in found:
        ratio = f["per_hour"] / base if f["per_hour"] and base else None
        spread = " / ".join(f"{s:.3f}" for s in f["speedups"]) if f["speedups"] else "-"
        regimes = ", ".join(f"{k} {n}: {m:.3f}" for k, (n, m) in f["regimes"].items())
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(f["statuses"].items()))
        ph = f["phases"]
        print(f"| {f['label']} | {f['gpu']} | {f['gpus']} | {f['evaluations']} | {f['wall_s']:.0f} | {f['per_hour']} "
              f"| {_fmt(ratio)} | {_fmt(f['honest_s'])} | {_fmt(f['eager_s'])} | {_fmt(ph['calibration'])} "
              f"| {_fmt(ph['load'])} | {_fmt(ph['trials'])} | {_fmt(ph['timing'])} | {_fmt(ph['trust_fp64'])} "
              f"| {spread} | {f['outside']} | {regimes} | {verdicts} | {f['fresh_candidates']} "
              f"| {f['disagree']} / {f.get('unchecked', 0)} "
              f"| {'{} / {}'.format(*f.get('drawn', (0, 0)))} / {f.get('stuck', 0)} |")
    for f in found:  # a busy parent (one Python process, its threads under one GIL) delays every slot's events
        if f.get("parent_cpu_s") is not None and f["wall_s"]:
            print(f"{f['label']}: the kbench process's own CPU {f['parent_cpu_s']:.1f} s over {f['wall_s']:.0f} s "
                  f"({100 * f['parent_cpu_s'] / f['wall_s']:.0f}% of one core)")
    print("\nPer-phase medians, seconds (honest rows, then eager rows; rest: outside the child's phases)")
    print("| run | " + " | ".join(PHASES) + " | rest | eager: " + " | ".join(EAGER_PHASES) + " | rest |")
    print("|" + "---|" * (len(PHASES) + len(EAGER_PHASES) + 3))
    for f in found:
        print(f"| {f['label']} | " + " | ".join(_fmt(f["phases"][p], ".3f") for p in PHASES)
              + f" | {_fmt(f['honest_rest'], '.3f')} | "
              + " | ".join(_fmt(f["eager_phases"][p], ".3f") for p in EAGER_PHASES)
              + f" | {_fmt(f['eager_rest'], '.3f')} |")
    spent = [f for f in found if f.get("spent")]
    if spent:
        print("\nWhere the timing phase went (honest rows, medians, seconds; diagnostics.protocol.spent): samples: "
              "both sides' timed samples (the kept ones); switch, arm, window: thawing and freezing the candidate, its "
              "Arm requests and the judge's windows, within its calls; inputs: making each round's inputs; other: "
              "the rest of the phase; drew on: rows that drew past the first draws / whose left-out groups were the "
              "same on both sides / with a group left out of one side only; slow samples: the share of both sides' "
              "samples more than 5% above their side's median")
        columns = (*_spent_fields(), "inputs_s", "recheck_s", "other_s")
        print("| run | timing | " + " | ".join(k.removesuffix("_s") for k in columns)
              + " | samples | drew on | slow samples | timing core MHz |")
        print("|" + "---|" * (len(columns) + 6))
        for f in spent:
            sp = f["spent"]
            on = " / ".join(str(n) for n in f["drew_on"]) if f.get("drew_on") else "-"
            print(f"| {f['label']} | {_fmt(sp['timing'], '.3f')} | " + " | ".join(_fmt(sp[k], ".3f") for k in columns)
                  + f" | {_fmt(sp['samples_s'], '.3f')} | {on} | "
                  + (f"{100 * f['slow']:.1f}%" if f.get("slow") is not None else "-")
                  + f" | {_fmt(sp['core_mhz'], '.0f')} |")
    lanes = [(f.name, slot_figures(f / "timeline.jsonl")) for f in folders if (f / "timeline.jsonl").exists()]
    if lanes:
        print("\nWhere each GPU's wall went between turns (medians over jobs, seconds; kbench.execution.timeline):"
              " turn->timed: the exclusive, timed part; timed->answered: its checks; answered->exited: the worker's "
              "exit; exited->swept: the kill and /dev/shm sweep; swept->next turn: the next job's wait; worker start: "
              "from its start to ready for a job (its CUDA context made); ready after the turn: jobs / seconds the "
              "turns waited")
        print("| run | kind | jobs | turn->timed | timed->answered | answered->exited | exited->swept "
              "| swept->next turn | turn to next turn | timed share of the cycles | worker start | ready after the "
              "turn |")
        print("|" + "---|" * 12)
        for label, found in lanes:
            for kind, f in found.items():
                print(f"| {label} | {kind} | {f['jobs']} | " + " | ".join(_fmt(f[k], ".3f") for k in SEGMENTS)
                      + f" | {_fmt(f['cycle'], '.3f')} | {_fmt(f['share'], '.2f')} | {_fmt(f['start'], '.3f')} | "
                      + ("{} / {:.1f}".format(*f["late"]) if f["late"] else "-") + " |")
    if rows:
        for folder in folders:
            _rows(folder)


SEGMENTS = ("turn->timed", "timed->answered", "answered->exited", "exited->swept", "swept->next turn")


def slot_figures(path: Path) -> dict[str, dict]:
    """Per kind of job (eager or solution): the median seconds of each segment of a job's time on its slot, from its
    turn to the next job's turn there, and the share of those cycles spent in the timed part (turn->timed)."""
    sys.path.insert(0, str(ROOT))
    from kbench.execution.timeline import read

    jobs: dict[str, dict] = {}
    for e in read(str(path)):
        jobs.setdefault(e.job, {"slot": e.slot, "mode": e.mode})[e.event] = e.t
    by_slot: dict[str, list[dict]] = {}
    for job in jobs.values():
        if "turn" in job and "timed" in job:
            by_slot.setdefault(job["slot"], []).append(job)
    out: dict[str, dict] = {}
    for slot_jobs in by_slot.values():
        slot_jobs.sort(key=lambda j: j["turn"])
        for job, after in zip(slot_jobs, [*slot_jobs[1:], None]):
            kind = "eager" if job["mode"] == "reference" else "solution"
            seg = out.setdefault(kind, {k: [] for k in (*SEGMENTS, "cycle", "timed_in_cycle", "start", "late")})
            if "started" in job and "ready" in job:  # the worker's start, and how long its turn waited for it
                seg["start"].append(job["ready"] - job["started"])
                seg["late"].append(max(0.0, job["ready"] - job["turn"]))
            pairs = zip(("turn", "timed", "answered", "exited"), ("timed", "answered", "exited", "swept"))
            for (a, b), name in zip(pairs, SEGMENTS):
                if a in job and b in job:
                    seg[name].append(job[b] - job[a])
            if after is not None and "swept" in job and after["turn"] - job["turn"] < 60:  # not across a resume
                seg["swept->next turn"].append(after["turn"] - job["swept"])
                seg["cycle"].append(after["turn"] - job["turn"])
                seg["timed_in_cycle"].append(job["timed"] - job["turn"])
    return {kind: {"jobs": len(seg["cycle"]), **{k: _median(seg[k]) for k in (*SEGMENTS, "cycle", "start")},
                   "share": sum(seg["timed_in_cycle"]) / sum(seg["cycle"]) if seg["cycle"] else None,
                   # jobs whose worker was ready only after its turn came, and the seconds their turns waited
                   "late": (sum(1 for t in seg["late"] if t > 1e-3), sum(seg["late"])) if seg["late"] else None}
            for kind, seg in out.items()}


def _rows(folder: Path) -> None:
    doc = _load(_run_dir(folder / "results"))
    print(f"\n{folder.name}: problem | solution | GPU | status | vs eager | eager ms | solution ms | regime "
          "| process ratios (before the import, after the rounds) | memory draws (kept: solution/eager of all, "
          "spreads) | warnings | top kernels (candidate's process, after timing)")
    for r in sorted(doc["evaluations"], key=lambda r: (r["problem"], r["solution"])):
        if r["solution"] in REFERENCE_ROWS:
            continue
        eager = (r.get("eager_timing") or {}).get("median")
        own = (r.get("timing") or {}).get("median")
        check = (r.get("diagnostics") or {}).get("processes") or {}
        retried = check.get("after_retries") or 0
        processes = f"{check.get('ratios')} after {check.get('after')}" + (f" ({retried} fresh)" if retried else "")
        drawn = ((r.get("diagnostics") or {}).get("protocol") or {}).get("placements") or {}
        draws = (f"{drawn['solution_groups_kept']}/{drawn['eager_groups_kept']} of {drawn['groups']}, "
                 f"{drawn['solution_spread']:.3f}/{drawn['eager_spread']:.3f}" if drawn else "-")
        codes = ",".join(sorted({w["code"] for w in r.get("warnings", [])}))
        top = "; ".join(f"{name[:60]} {us:.0f}us" for name, us in ((r.get("kernels") or {}).get("top") or [])[:2])
        print(f"{r['problem']} | {r['solution']} | {r.get('gpu')} | {r['status']} "
              f"| {_fmt(r.get('speedup_vs_eager') or (r.get('withheld') or {}).get('speedup_vs_eager'), '.3f')} "
              f"| {_fmt(eager and eager * 1e3, '.3f')} | {_fmt(own and own * 1e3, '.3f')} "
              f"| {(r.get('timing') or {}).get('regime', '')} | {processes} | {draws} | {codes} | {top}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernelbench", type=Path, help="a KernelBench checkout's KernelBench/ folder (level1/ ...)")
    parser.add_argument("work", type=Path, help="scratch folder: problems, solutions, and runs/<label>/")
    parser.add_argument("--level", type=int, default=2)
    parser.add_argument("--only", action="append", default=[], help="a problem's file name or number; repeatable")
    parser.add_argument("--first", type=int, help="only the first N problems of the level")
    parser.add_argument("--copies", type=int, default=1, help="honest solutions per problem")
    parser.add_argument("--probe-kernels", action="store_true",
                        help="honest copies declare an unbuilt kernel, so the kernel profile records their kernels")
    parser.add_argument("--gpus", action="append", default=[], help="a CUDA_VISIBLE_DEVICES set; repeatable")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each --gpus set")
    parser.add_argument("--label", default="", help="a prefix for the runs' folders")
    parser.add_argument("--budget", type=float, default=560.0, help="seconds this invocation may spend")
    parser.add_argument("--table", action="store_true", help="print the tables of the runs WORK holds; run nothing")
    parser.add_argument("--rows", action="store_true", help="also one line per honest row")
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.run_args = argv[cut + 1:]  # extra `kbench run` options, after --
    if not args.table:
        deadline = time.monotonic() + args.budget
        count = prepare(args.kernelbench, args.work, args.level, args.only, args.first, args.copies,
                        args.probe_kernels)
        print(f"{count} problems, {args.copies} honest copy(ies) each, in {args.work}", flush=True)
        for repeat in range(args.repeat):
            for gpus in args.gpus:
                label = (f"{args.label}-" if args.label else "") + _label(gpus, repeat)
                if not run_set(args.work, label, gpus, args.run_args, deadline):
                    table(args.work, args.rows)
                    return
    table(args.work, args.rows)


if __name__ == "__main__":
    main(sys.argv[1:])
