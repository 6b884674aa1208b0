"""What a reader must know before quoting a run's numbers: the caveats box and the provenance header of every report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from kbench.results.codec import JsonObject
from kbench.results.findings import FindingCode
from kbench.results.records import COMPILED, EAGER, Evaluation, Measurement, Regime, Status, problem_order
from kbench.results.speedups import NOISE_BAND
from kbench.results.stats import median

# Findings on a `correct` row that weaken its verdict or its number (not enough to make it suspect), in words. A check
# of kbench's own that could not run (`[check_skipped]`: the float64 oracle on a model of mixed dtypes, say) weakens
# nothing of the row's: it stays a note of the row's, kbench's own.
WEAKENING = {
    "harness_access": "reached the harness's objects in its process",
    "gpu_throttled": "the GPU was throttled while it was timed",
    "gpu_busy": "other processes held the GPU while it was timed",
    "machine_busy": "other processes kept the CPU busy while it was timed",
    "level_moved": "its time moved while it was timed",
    "few_samples": "too few samples for a steady median",
    "degenerate_constant": "the problem cannot tell a constant from the right answer",
    "degenerate_inputs": "the problem's inputs make a wrong answer pass",
    "tolerance_below_noise": "the tolerance is below the reference's own error",
}
# What the reference's own checks found wrong with a problem (on its eager row): its rows' numbers rest on a problem
# that tells right from wrong poorly, so the box counts such problems.
DEGENERATE = {
    "degenerate_zeros": "most of the reference's output is exactly zero",
    "degenerate_constant": "a constant passes for the reference's output",
    "degenerate_inputs": "outputs for two input seeds agree within the tolerance",
}
# Why a row is suspect, by the finding that made it so (kbench.results.findings.SUSPECT), in words: the box groups a
# suite's suspect rows by it.
SUSPICION = {
    FindingCode.ESCAPED_TIMER: "work escaped the timer",
    FindingCode.TIMER_MISMATCH: "its reported times disagree with the judge's window",
    FindingCode.BELOW_FLOOR: "faster than the hardware allows",
    FindingCode.STATE_CHANGED: "it changed torch's process-wide state",
    FindingCode.CLOCK_PATCHED: "it replaced the timers in its process",
    FindingCode.REFERENCE_DISTURBED: "the reference slowed down beside it",
    FindingCode.ESCAPED_PROCESS: "a process it started ran while the reference was timed",
    FindingCode.REGIME_CHANGED: "its calls changed timing regime",
    FindingCode.UNFINISHED_WORK: "work was still running when its call returned",
    FindingCode.PROCESSES_DISAGREE: "the reference's time differed between processes",
    FindingCode.PROCESSES_UNCHECKED: "the reference could not be timed again in its process",
}
OTHER_SUSPICION = "other"
NOT_MEASURED = "not measured"
FOLD_NAMES = 5  # a weakness shared by more rows names this many of them, then counts the rest


def weakening(row: Evaluation) -> list[str]:
    return [c.value for c in dict.fromkeys(row.flags) if c in WEAKENING]


def suspicion(row: Evaluation) -> str:
    """The code of the first finding that made a suspect row so (OTHER_SUSPICION where none is on it)."""
    return next((c.value for c in row.flags if c.suspect), OTHER_SUSPICION)


def suspicion_words(code: str) -> str:
    return next((words for c, words in SUSPICION.items() if c.value == code), "its timing cannot be trusted")


@dataclass(frozen=True)
class Caveats:
    """The first screen's "before you quote these numbers": each a list of (what, why) lines; empty when clean."""

    suspects: tuple[tuple[Evaluation, str], ...]
    weakened: tuple[tuple[Evaluation, tuple[str, ...]], ...]
    unmeasured: tuple[str, ...]
    incomplete: str
    degenerate: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a DEGENERATE code, the problems its reference has it
    # How some numbers were measured, which no row's warning says: what, and the correct rows it concerns
    measured: tuple[tuple[str, tuple[Evaluation, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.suspects or self.weakened or self.unmeasured or self.incomplete or self.degenerate
                    or self.measured)

    @property
    def suspicions(self) -> tuple[tuple[str, tuple[tuple[Evaluation, str], ...]], ...]:
        """The suspect rows grouped by what made them so (`suspicion`), the largest group first: forty suspects of
        one kind make one line of the box, not forty."""
        groups: dict[str, list[tuple[Evaluation, str]]] = {}
        for e, why in self.suspects:
            groups.setdefault(suspicion(e), []).append((e, why))
        ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
        return tuple((code, tuple(sorted(rows, key=lambda r: (problem_order(r[0].problem), r[0].solution))))
                     for code, rows in ordered)

    @property
    def weaknesses(self) -> tuple[tuple[str, tuple[Evaluation, ...]], ...]:
        """Each weakness (a WEAKENING code) once, with the rows it weakens: a suite's hundred rows timed on a busy
        GPU make one line, not a hundred."""
        rows: dict[str, list[Evaluation]] = {code: [] for code in WEAKENING}
        for e, found in self.weakened:
            for code in found:
                rows[code].append(e)
        return tuple((code, tuple(sorted(found, key=lambda e: (problem_order(e.problem), e.solution))))
                     for code, found in rows.items() if found)

    def lines(self) -> list[str]:
        """The box as plain lines (the terminal and markdown reports)."""
        out = [f"incomplete run: {self.incomplete}"] if self.incomplete else []
        for code, suspect in self.suspicions:
            if len(suspect) == 1:
                (e, why), = suspect
                out.append(f"suspect: {e.problem}/{e.solution}: {why}")
                continue
            names = _folded([f"{e.problem}/{e.solution}" for e, _ in suspect])
            out.append(f"suspect, {len(suspect)} rows: {suspicion_words(code)} [{code}]: {names}")
        for code, rows in self.weaknesses:
            names = _folded([f"{e.problem}/{e.solution}" for e in rows])
            out.append(f"weakened: {names}: {WEAKENING[code]}" if len(rows) == 1 else
                       f"weakened, {len(rows)} rows: {WEAKENING[code]} [{code}]: {names}")
        for code, problems in self.degenerate:
            out.append(f"degenerate problems, {len(problems)}: {DEGENERATE[code]} [{code}]: {_folded(problems)}")
        for what, rows in self.measured:
            names = _folded([f"{e.problem}/{e.solution}" for e in rows])
            out.append(f"measured, {len(rows)} row(s): {what}: {names}")
        out += [f"baseline {u}" for u in self.unmeasured]
        return out


def _folded(names: Sequence[str]) -> str:
    """The first FOLD_NAMES names, then how many more."""
    more = f" and {len(names) - FOLD_NAMES} more" if len(names) > FOLD_NAMES else ""
    return ", ".join(names[:FOLD_NAMES]) + more


def compile_measured(doc: JsonObject, evaluations: Sequence[Evaluation]) -> bool:
    """Whether the run timed torch.compile at all."""
    return bool((doc.get("config") or {}).get("compile_baseline", True)) and any(
        e.solution == COMPILED for e in evaluations)


def caveats(doc: JsonObject, evaluations: Sequence[Evaluation], state: str | None = None) -> Caveats:
    """The run's caveats. `state`: the run's state as kbench.results.storage tells it (default: the file's)."""
    solutions = [e for e in evaluations if e.solution not in (EAGER, COMPILED)]
    suspects = tuple((e, e.message.removeprefix("outputs pass, timing not trusted: ")) for e in solutions
                     if e.status == Status.SUSPECT)
    weakened = tuple((e, tuple(found)) for e in solutions if e.status == Status.CORRECT and (found := weakening(e)))
    unmeasured = []
    if not compile_measured(doc, evaluations):
        unmeasured.append(f"torch.compile: {NOT_MEASURED} in this run (--no-compile-baseline): its column reads "
                          f"'{NOT_MEASURED}'")
    failed = sorted({e.problem for e in evaluations if e.solution in (EAGER, COMPILED) and e.status != Status.CORRECT},
                    key=problem_order)
    if failed:
        unmeasured.append(f"failed on {len(failed)} problem(s): {', '.join(failed)}")
    state = state or str(doc.get("state", ""))
    run = doc.get("run_id", "RUN")
    incomplete = "" if state in ("complete", "") else {
        "running": "still running: rows may be missing",
        "interrupted": f"interrupted: rows are missing (kbench run --resume {run} finishes it)",
    }.get(state, f"its process is gone and it never finished: rows are missing (kbench run --resume {run} finishes it)")
    degenerate = tuple((code, problems) for code in DEGENERATE if (problems := tuple(sorted(
        {e.problem for e in evaluations if e.solution == EAGER and code in {f.value for f in e.flags}},
        key=problem_order))))
    return Caveats(suspects, weakened, tuple(unmeasured), incomplete, degenerate, measurement_notes(evaluations))


def measurement_notes(evaluations: Sequence[Evaluation]) -> tuple[tuple[str, tuple[Evaluation, ...]], ...]:
    """How some of the run's numbers were measured, where that weakens them and no warning of the row says it: correct
    rows timed in the host regime on a GPU (launch-bound calls: honest copies there read up to 3% fast, against 1.000
    in the GPU regime, docs/benchmarks.md), rows divided by a witness process rather than the judge's eager, and rows
    whose eager beside them differs from their problem's eager row beyond the noise band (the same reference ran at
    two speeds: the 0.77x honest copy of KernelBench level 2's #77 on four GPUs, 2026-11-27), and rows whose speed
    moved with where their memory lay (timed on each side's fastest draws, kbench.judge.timing.placement). (Where
    a run's rows ran is in its provenance, GPU by GPU, and under each problem whose rows ran on several: each speedup
    divides by the eager of its own rounds, on its own GPU, so that weakens none.)"""
    correct = sorted((e for e in evaluations if e.solution not in (EAGER, COMPILED) and e.status == Status.CORRECT
                      and e.timing is not None), key=lambda e: (problem_order(e.problem), e.solution))
    host = tuple(e for e in correct if e.device == "cuda" and e.timing and e.timing.regime == Regime.HOST.value)
    witness = tuple(e for e in correct if (p := e.diagnostics.protocol) and p.divisor and p.divisor.by == "witness")
    out: list[tuple[str, tuple[Evaluation, ...]]] = []
    if host:
        out.append(("timed in the host regime (launch-bound calls): the host's speed is in their times, and honest "
                    "copies there have read up to 1.03x", host))
    if witness:
        out.append(("divided by the reference timed in a witness process, not by the judge's eager beside them",
                    witness))
    moved = tuple(e for e in correct if (p := e.diagnostics.protocol) and p.placements and p.placements.left_out)
    if moved:
        out.append(("ran at another speed on other memory: each side timed on the fastest memory it drew, the rest "
                    "left out (the eager row is one draw, and may read the slower speed)", moved))
    eager_rows = {e.problem: e.timing.median for e in evaluations if e.solution == EAGER and e.timing is not None}
    apart = tuple(e for e in correct if e.eager_timing is not None and e.problem in eager_rows
                  and abs(e.eager_timing.median / eager_rows[e.problem] - 1) > NOISE_BAND)
    if apart:
        out.append((f"the eager timed beside them differs from their problem's eager row by more than "
                    f"{NOISE_BAND:.0%}: two processes (or GPUs) ran the same reference at different speeds", apart))
    return tuple(out)


def degenerate_problems(evaluations: Sequence[Evaluation]) -> set[str]:
    """The problems whose reference tells right from wrong poorly (a DEGENERATE finding on their eager row)."""
    return {e.problem for e in evaluations if e.solution == EAGER and any(f.value in DEGENERATE for f in e.flags)}


def headline(evaluations: Sequence[Evaluation], problem: str) -> tuple[Evaluation | None, bool]:
    """A problem's fastest correct solution and whether something weakens it (the report marks it): a warning of its
    own, or a reference that tells right from wrong poorly (a DEGENERATE finding on the problem's eager row: a
    solution returning zeros may be `correct` there)."""
    rows = [e for e in evaluations if e.problem == problem and e.solution not in (EAGER, COMPILED)
            and e.status == Status.CORRECT and e.timing]
    best = min(rows, key=lambda e: cast(Measurement, e.timing).median) if rows else None  # rows: timed
    return best, best is not None and (bool(weakening(best)) or problem in degenerate_problems(evaluations))


@dataclass(frozen=True)
class Provenance:
    """Where the numbers come from, in a few plain lines."""

    kbench: str
    code: str  # commit, and whether the tree was dirty
    dirty: bool
    device: str  # GPU and driver, or the CPU
    clocks: str  # observed SM clocks while timing, min and median (GPU)
    method: str  # timing method and regimes
    precision: str
    tolerance: str
    sandbox: str
    calls: str = "the forward"  # what one timed call holds: the forward, or forward and backward (--backward)
    processes: str = "not recorded"  # did the judge's and the candidates' processes run the reference alike

    def lines(self) -> list[tuple[str, str]]:
        return [("kbench", self.kbench), ("code", self.code), ("device", self.device),
                ("SM clock while timing", self.clocks), ("timing", self.method), ("processes", self.processes),
                ("calls", self.calls), ("precision", self.precision), ("tolerance", self.tolerance),
                ("sandbox", self.sandbox)]


def provenance(doc: JsonObject, evaluations: Sequence[Evaluation]) -> Provenance:
    env, git, config = doc.get("environment") or {}, doc.get("git") or {}, doc.get("config") or {}
    gpu = env.get("gpu") or {}
    device = f"{gpu['name']}, driver {env.get('driver', '?')}" if gpu.get("name") else f"CPU: {env.get('cpu', '?')}"
    device += f"; torch {env.get('torch', '?')}" + _spread(evaluations)
    dirty = bool(git.get("dirty"))
    code = (f"{str(git.get('commit', '?'))[:12]}{' with uncommitted changes (dirty)' if dirty else ''}" if git
            else "unknown")
    return Provenance(kbench=str(env.get("kbench", "unknown (before 0.1.0 recorded it)")), code=code, dirty=dirty,
                      device=device, clocks=_clocks(evaluations), method=_method(evaluations),
                      precision=str(config.get("precision") or "each problem's own (fp32 unless it says)"),
                      tolerance=_tolerance(config), sandbox=_sandbox(evaluations), calls=_calls(evaluations),
                      processes=_processes(evaluations))


def _spread(evaluations: Sequence[Evaluation]) -> str:
    """Where the rows ran, when they ran on more than one GPU: each GPU (index and model) and its row count."""
    placed = Counter((e.gpu, e.gpu_name) for e in evaluations if e.gpu is not None)
    if len({gpu for gpu, _ in placed}) < 2:
        return ""
    where = ", ".join(f"{gpu}{f' ({name})' if name else ''}: {n}"
                      for (gpu, name), n in sorted(placed.items(), key=lambda kv: problem_order(str(kv[0][0]))))
    return f"; rows spread over {len({gpu for gpu, _ in placed})} GPUs (GPU: rows) {where}"


def _processes(evaluations: Sequence[Evaluation]) -> str:
    """What the check of the judge's and the candidates' processes found and did, over the solution rows: the
    reference timed in both before the solution was imported, and again in the candidate's after the solution's rounds
    for a big call; and the big calls whose memory both sides drew anew (docs/timing.md)."""
    checked = [e for e in evaluations if e.solution not in (EAGER, COMPILED) and e.diagnostics.processes is not None]
    if not checked:
        return "not recorded (a run from before the check, or no solution timed)"
    found = [e.diagnostics.processes for e in checked if e.diagnostics.processes is not None]
    fresh = sum(1 for p in found if p.fresh_candidates > p.after_retries)  # before the import
    after = sum(1 for p in found if p.after is not None)
    after_apart = sum(1 for p in found if p.after_disagrees)
    unmeasured = sum(1 for p in found if p.after_unmeasured)
    after_again = sum(1 for p in found if p.after_retries and not p.after_disagrees and not p.after_unmeasured)
    # before the import (runs from before `disagrees` was recorded: the finding, which only that check gave then)
    disagree = sum(1 for e in checked if (c := e.diagnostics.processes) is not None and (
        c.disagrees or (FindingCode.PROCESSES_DISAGREE in e.flags and c.after is None)))
    witness = sum(1 for e in checked if (p := e.diagnostics.protocol) and p.divisor and p.divisor.by == "witness")
    drawn = [d for e in checked if (p := e.diagnostics.protocol) and (d := p.placements) is not None]
    moved = sum(1 for d in drawn if d.left_out)
    parts = [f"{len(checked) - fresh} of {len(checked)} row(s) agreed in their first candidate process"]
    if fresh:
        parts.append(f"{fresh - disagree} went into a fresh candidate process and agreed there")
    if disagree:
        parts.append(f"{disagree} disagreed in every process tried: suspect, no speedup")
    if after:
        parts.append(f"{after} timed the reference again in the candidate's process after the solution's rounds"
                     + (f", {after_again} agreeing only in a fresh candidate process" if after_again else "")
                     + (f", {after_apart} apart from the judge's in every process tried: suspect, no speedup"
                        if after_apart else ", all in agreement" if not (after_again or unmeasured) else ""))
    if unmeasured:
        parts.append(f"{unmeasured} could not time the reference again there, in every process tried: suspect, "
                     "no speedup")
    stuck = sum(1 for d in drawn if d.stuck)
    if drawn:
        parts.append(f"{len(drawn)} big call(s) drew their memory anew every few rounds"
                     + (f", {moved} of them at another speed on other memory: timed on each side's fastest draws"
                        if moved else ", none at another speed on other memory")
                     + (f", {stuck} with a side at the other's slow memory on every draw, in every process tried: "
                        "suspect, no speedup" if stuck else ""))
    if witness:
        parts.append(f"{witness} host-regime row(s) divided by a witness process, not the judge's eager")
    return "; ".join(parts)


def _calls(evaluations: Sequence[Evaluation]) -> str:
    """What a timed call holds, over the run's rows."""
    both = sum(e.backward for e in evaluations)
    if both == 0:
        return "the forward"
    if both == len(evaluations):
        return "forward and backward as one call (--backward): output, input and parameter gradients compared"
    return f"forward and backward on {both} of {len(evaluations)} row(s) (--backward), the forward on the rest"


def _clocks(evaluations: Sequence[Evaluation]) -> str:
    gpus = [m.gpu for e in evaluations if (m := e.diagnostics.machine) is not None and m.gpu is not None]
    seen = [float(g.sm_mhz) for g in gpus if g.sm_mhz]
    peak = [float(g.max_sm_mhz) for g in gpus if g.max_sm_mhz]
    if not seen:
        return "not recorded"
    top = f" of {max(peak):.0f} MHz" if peak else ""
    return f"min {min(seen):.0f} MHz, median {median(seen):.0f} MHz{top} (right after each row's timing)"


def _method(evaluations: Sequence[Evaluation]) -> str:
    regimes = [e.timing.regime for e in evaluations if e.timing is not None]
    counts = [(regimes.count(regime), regime) for regime in Regime]
    if not any(n for n, _ in counts):
        return "medians of per-call samples (regime not recorded: a run from before timing v3)"
    return ("medians of per-call samples, L2 flushed before each call; "
            + ", ".join(f"{n} row(s) in {regime.words}" for n, regime in counts))


SANDBOX_WORDS = {"namespaces": "namespaces (own PID, network and mount namespaces, read-only files, limits)",
                 "namespaces_writes_kept": "namespaces, but the build folder and kernel DSL caches keep what the "
                                           "candidate wrote (no overlay file system on this machine)",
                 "limits": "limits only (no namespaces on this machine)", "none": "none (switched off)"}


def _sandbox(evaluations: Sequence[Evaluation]) -> str:
    """Which sandbox the solutions' candidates had (docs/sandbox.md), counted over the solution rows."""
    levels = Counter(e.diagnostics.sandbox for e in evaluations
                     if e.solution not in (EAGER, COMPILED) and e.diagnostics.sandbox)
    if not levels:
        return "not recorded (a run from before the sandbox, or no solution evaluated)"
    return "; ".join(f"{SANDBOX_WORDS.get(level, level)} on {n} row(s)" for level, n in levels.most_common())


def _tolerance(config: JsonObject) -> str:
    atol, rtol = config.get("atol"), config.get("rtol")
    fixed = f", atol={atol:g}, rtol={rtol:g}" if atol is not None and rtol is not None else ""
    return f"profile '{config.get('tolerance', 'problem')}'{fixed}"
