"""The judge: one evaluation of a solution, decided in a process that never imports it.

The judge builds the reference, makes every input, keeps the reference's outputs and runs every comparison, the
float64 oracle and the eager timing. The solution lives in a candidate process it spawns (kbench.judge.candidate) and
speaks to through kbench.judge.protocol. See the README's "The judge" for the protocol and what each step defends.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from kbench.judge import correctness, kernel_names, protocol, trust
from kbench.measure import timing
from kbench.system import escapes, machine
from kbench.judge.harness import (
    Phases, apply_math_flags, guarded, job_reference, load_problem, make_timer, pin, set_sizes, timing_core,
    with_peak,
)
from kbench.judge.session import Announce, CandidateProcess, Session
from kbench.judge.verdicts import Verdict
from kbench.results.records import MathFlags, TimingPolicy

_perf_counter = time.perf_counter

CALIBRATION_SAMPLES = (4, 24)  # at least, at most: the first are discarded (first-touch costs)
CALIBRATION_DISCARD = 2
CALIBRATION_S = 0.5  # no more calibration samples once this long has passed
RECHECK_ALL_NUMEL = 1 << 24  # outputs up to this many elements are checked after every timed call
RECHECK_SHARE = 0.25  # larger ones: five random calls among the first rounds, this share of the rest, and the last
RECHECK_FIRST = 5
TIMING_CLOCKS = ("torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time", "time.perf_counter",
                 "time.time", "time.monotonic")


def evaluate(job: dict[str, Any], announce: Announce, cand: CandidateProcess | None = None) -> dict[str, Any]:
    """The `evaluate` mode of the worker: this process is the judge; the solution runs in a candidate it spawned
    (ahead of the job, when the worker was started ahead)."""
    apply_math_flags(MathFlags(**job["math"]))
    torch.set_grad_enabled(False)
    escapes.become_subreaper()  # before any of the solution's code runs: its orphans stay in view (kbench.system.escapes)
    cand = cand or CandidateProcess()
    cand.announce(announce)
    _pin(job["device"], cand, judge=True)
    try:
        return _evaluate(job, Session(cand, job["device"]), announce)
    finally:
        cand.kill()
        escapes.kill_escaped(cand.proc.pid, cand.pgid)


def _pin(device: str, cand: CandidateProcess, judge: bool = False) -> None:
    """On CUDA the judge and its candidate issue their timed calls from one core (harness.timing_core)."""
    if device == "cuda":
        core = timing_core()
        if judge:
            pin(0, core)
        pin(cand.proc.pid, core)


def _evaluate(job: dict[str, Any], session: Session, announce: Announce) -> dict[str, Any]:
    device, seed = job["device"], job["seed"]
    phases = Phases()
    problem = load_problem(job)
    reference, init, make = job_reference(problem, job)
    probe_inputs = make(seed)
    probe, ref_peak = guarded(device, "the reference", partial(with_peak, device, partial(reference, *probe_inputs)),
                              judge_work="the reference's first call")
    calibration = _calibrate(job, session, reference, init, make, probe_inputs, probe)
    phases.mark("calibration")
    info = session.load(job["solution"]["path"], job.get("env", {}))
    copied = session.build("main", reference, init, seed)
    session.bind("main", probe_inputs, probe)
    del probe, probe_inputs
    _free_cached(device)
    result: dict[str, Any] = {"compile": info, "warnings": [],
                              "extra": {"state_dict_tensors_copied": copied, "phases": phases.seconds}}
    phases.mark("load")
    trials, warnings = _trials(job, session, reference, make, [seed + 1 + i for i in range(job["trials"])])
    result["trials"] = [t.__dict__ for t in trials]
    result["warnings"] += warnings
    phases.mark("trials")
    if not all(t.passed for t in trials):
        _finish(session, result)
        return {**result, "status": "incorrect", "message": trials[-1].message}
    failure = _other_sizes(job, problem, session, result)
    set_sizes(problem, job["problem"].get("overrides", {}))
    session.bind("main", make(seed))
    phases.mark("other_sizes")
    if failure:
        _finish(session, result)
        return {**result, "status": "incorrect", "message": failure}
    measured, figures, result["extra"]["machine"], busy = _time(job, session, reference, make, calibration)
    result["timing"], result["eager_timing"] = measured["solution"].to_json(), measured["eager"].to_json()
    result["extra"]["protocol"] = figures
    found = _timing_warnings(device, measured, calibration)
    found, result["extra"]["protocol"]["recalibration"] = settle_mismatch(
        found, measured["solution"], device, lambda: _recalibrate(job, reference, init, make))
    result["warnings"] += found + busy
    result["warnings"] += [w for w in (timing.level_moved_warning(measured["solution"], "the solution"),
                                       timing.level_moved_warning(measured["eager"], "the eager reference"))
                           if w is not None]
    phases.mark("timing")
    announce("timed")  # the parent may now start the next child (kbench.execution.isolation.WarmStarts)
    _trust(job, session, reference, make, result, phases)
    result["extra"]["peak_bytes"] = {"solution": session.peak_bytes, "reference": ref_peak}
    if (warning := memory_warning(session.peak_bytes, ref_peak)) is not None:
        result["warnings"].append(warning)
    return {**result, "status": "correct", "message": ""}


def _timing_warnings(device: str, measured: dict[str, Any], calibration: timing.Calibration) -> list[str]:
    found = [timing.timer_mismatch_warning(measured["solution"], calibration, cpu=device == "cpu")]
    if device == "cuda":  # on the CPU the freeze covers a disturbed reference, and the noise there is larger
        found += [timing.escaped_work_warning(measured["solution"], calibration.host_gap_p50),
                  timing.disturbed_warning(measured["eager"], calibration)]
    return [w for w in found if w is not None]


def _trust(job: dict[str, Any], session: Session, reference: Any, make: Callable[[int], list[Any]],
           result: dict[str, Any], phases: Phases) -> None:
    """Checks beyond the verdict: determinism and the kernel profile with the candidate, then, with the candidate
    ended and every shared buffer freed, the float64 oracle (the evaluation's largest use of memory)."""
    device, seed = job["device"], job["seed"] + 1
    keep = session.copied_outputs
    first, ref_first, warning = guarded(device, "the reference", lambda: trust.determinism(
        keep, lambda x: session.call_on(x)[0], reference, make, seed, device), judge_work="the determinism check")
    if warning is not None:
        result["warnings"].append(warning)
    phases.mark("trust_determinism")
    source = Path(job["solution"]["path"]).read_text()
    if trust.wants_kernel_profile(job):
        if kernel_names.declared(source):
            trust.kernel_profile(lambda: session.profile(make(seed), source), result)
        else:
            trust.no_declared_kernels(result)
        phases.mark("trust_profile")
    _finish(session, result)
    session.release()
    tf32 = MathFlags(**job["math"]).allows_tf32
    trust.accuracy(reference, make(seed), first, ref_first, device, tf32, result)
    phases.mark("trust_fp64")


MEMORY_WARN_FACTOR = 4.0  # a solution whose calls need this many times the reference's memory, and
MEMORY_WARN_FLOOR = 256 << 20  # at least this much more, is flagged


def settle_mismatch(found: list[str], solution: Any, device: str,
                    recalibrate: Callable[[], timing.Calibration | None]) -> tuple[list[str], dict[str, Any] | None]:
    """A `[timer_mismatch]` is checked once more against a calibration taken now (`recalibrate`): the protocol's own
    cost follows the host's speed, which on the H100 machine moved enough between calibration and timing to flag an
    honest solution (1 row in 4 runs). It stays only when the fresh calibration cannot explain the gap either. The
    figures of the fresh calibration, or None when there was nothing to settle."""
    if not any(w.startswith("[timer_mismatch]") for w in found):
        return found, None
    fresh = recalibrate()
    if fresh is None:
        return found, {"ran": False}
    again = timing.timer_mismatch_warning(solution, fresh, cpu=device == "cpu")
    kept = [w for w in found if not w.startswith("[timer_mismatch]")] + ([again] if again is not None else [])
    return kept, {"ran": True, "p50_s": fresh.p50, "p90_s": fresh.p90, "cleared": again is None}


def _recalibrate(job: dict[str, Any], reference: Any, init: list[Any],
                 make: Callable[[int], list[Any]]) -> timing.Calibration | None:
    """Calibration rounds now, with a fresh candidate process that holds nothing but the reference (spawned: this
    process has a CUDA context, so a fork could not use the GPU), pinned like the first. None if it cannot run."""
    device = job["device"]
    cand = CandidateProcess(init_cuda=device == "cuda")
    try:
        _pin(device, cand)
        inputs = make(job["seed"])
        out = reference(*inputs)
        return _calibrate(job, Session(cand, device), reference, init, make, inputs, out)
    except Exception:  # noqa: BLE001 - a harness check that could not run leaves the first verdict standing
        return None
    finally:
        cand.kill()


def memory_warning(solution: int, reference: int | None) -> str | None:
    """`[memory]` when a solution's calls need far more GPU memory than the reference's (peaks above what was
    allocated before each call)."""
    if reference is None or solution <= max(MEMORY_WARN_FACTOR * reference, reference + MEMORY_WARN_FLOOR):
        return None
    return (f"[memory] a call of the solution allocates up to {solution / 2**20:.0f} MiB, the reference's "
            f"{reference / 2**20:.0f} MiB")


def _free_cached(device: str) -> None:
    """Hand the judge's cached, unused blocks back to the device: the candidate's process cannot use them."""
    if device == "cuda":
        torch.cuda.empty_cache()


def _calibrate(job: dict[str, Any], session: Session, reference: Any, init: list[Any], make: Callable[[int], list[Any]],
               inputs: list[Any], outputs: Any) -> timing.Calibration:
    """Rounds of the timing protocol with the reference on both sides: the candidate's process still holds nothing
    but kbench and the reference, so each round trip's excess over the reported time is what the protocol costs for a
    call like this one, under this machine's conditions now (the judge's own samples interleaved, as in timing)."""
    session.start_calibration(job, reference, init, inputs, outputs)
    timer = make_timer(job["device"])
    gaps: list[float] = []
    eager: list[float] = []
    issue: list[float] = []
    host_gaps: list[float] = []
    start = _perf_counter()
    low, high = CALIBRATION_SAMPLES
    while len(gaps) < high and (len(gaps) < low or _perf_counter() - start < CALIBRATION_S):
        values = make(job["seed"] - 1 - len(gaps))
        session.refill(values, sealed=seals(job["device"]))
        timing.settle(job["device"])
        eager.append(timer.sample(lambda: reference(*values))[0])
        issue.append(timer.last_issue)
        sample = session.sample()
        gaps.append((sample.judge or 0.0) - sample.timed)
        host_gaps.append(sample.wall - sample.timed)
    keep = slice(CALIBRATION_DISCARD, None)
    return timing.Calibration(tuple(gaps[keep]), tuple(eager[keep]), tuple(host_gaps[keep]), tuple(issue[keep]))


def _trials(job: dict[str, Any], session: Session, reference: Any, make: Callable[[int], list[Any]],
            seeds: list[int]) -> tuple[list[Any], list[str]]:
    """Correctness trials: the candidate's outputs stay in the shared buffers and are compared there, chunk by chunk,
    with the reference's output on the judge's own copy of the inputs (no clone of kbench's own)."""
    device = job["device"]
    found = guarded(device, "the reference", lambda: correctness.run_trials(
        make, session.call_on, reference, seeds, job["atol"], job["rtol"], sync=lambda: timing.synchronize(device)),
        judge_work="the correctness trials")
    _free_cached(device)
    return found


def _other_sizes(job: dict[str, Any], problem: Any, session: Session, result: dict[str, Any]) -> str:
    """Correctness trials at each further size (fresh models, inputs and buffers); a message on the first failure.

    A solution that hard-codes the sizes it was written for passes at one size and fails at another.
    """
    device, seed = job["device"], job["seed"]
    result["size_checks"] = {}
    for other in job.get("other_sizes", []):
        set_sizes(problem, other["overrides"])
        reference, init, make = job_reference(problem, job)
        probe_inputs = make(seed)
        probe = guarded(device, "the reference", partial(reference, *probe_inputs),
                        judge_work=f"the reference's first call at size {other['name']}")
        name = f"size {other['name']}"
        try:
            session.build(name, reference, init, seed)
            session.bind(name, probe_inputs, probe)
            trials, _ = _trials(job, session, reference, make, [seed + 101 + i for i in range(job["trials"])])
        except Verdict as v:
            raise Verdict(v.status, f"at size {other['name']}: {v.message}") from None
        result["size_checks"][other["name"]] = [t.__dict__ for t in trials]
        del reference, probe
        if not all(t.passed for t in trials):
            return f"at size {other['name']}: {trials[-1].message}"
    return ""


def _time(job: dict[str, Any], session: Session, reference: Any, make: Callable[[int], list[Any]],
          calibration: timing.Calibration) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]:
    """Candidate and eager reference in alternating rounds: fresh inputs before each round, the candidate's outputs
    checked against the reference's on the same values after it (every round, or a random subset for big outputs).

    Primed rounds, for a launch-bound reference (its time is the host's, and a call right after a call of the same
    code in the same process ran several percent faster on the H100): each side's timed call follows an untimed call
    of its own and a copy of the round's inputs. The judge calls the reference on the fresh inputs, copies them into
    its own second set and times its call there; the candidate calls on the last round's inputs, the judge then
    writes the fresh ones into the shared buffers, and the candidate's call on them is timed. The fresh inputs reach
    the candidate only after its untimed call has returned and its process is frozen again."""
    device, policy = job["device"], TimingPolicy(**job["timing"])
    timer = make_timer(device)
    primed = primed_rounds(device, calibration)
    rng = random.Random(secrets.randbits(64))
    base = secrets.randbits(30)  # unpredictable seeds: no output can be computed ahead of its call
    cheap = sum(b.numel() for b in session.buffers[session.name] if b is not None) <= RECHECK_ALL_NUMEL
    forced = set(rng.sample(range(policy.min_samples), min(RECHECK_FIRST, policy.min_samples)))
    state: dict[str, Any] = {"inputs": None, "ref": None, "second": None, "checked": -2, "count": 0,
                             "refresh_s": 0.0, "check_s": 0.0}

    def refill() -> None:
        start = _perf_counter()
        session.refill(state["inputs"], sealed=seals(device))  # unsealed by the candidate inside its request
        timing.settle(device)
        state["refresh_s"] += _perf_counter() - start

    def before(index: int) -> None:
        start = _perf_counter()
        state["inputs"] = state["ref"] = None  # the last round's go before this round's are made
        state["inputs"] = make(base + index + 1)
        state["refresh_s"] += _perf_counter() - start
        if primed:
            timing.settle(device)
        else:
            refill()

    def eager() -> timing.Sampled:
        held: list[Any] = []
        inputs = state["inputs"]
        if primed:
            reference(*inputs)
            state["second"] = _copied(inputs, state["second"])
            inputs = state["second"]
            timing.synchronize(device)
        timed, wall = timer.sample(lambda: held.append(reference(*inputs)))
        state["ref"] = held[0]
        return timing.Sampled(timed, wall, None, timer.last_issue)

    def solution() -> timing.Sampled:
        if primed:
            session.sample()  # on the last round's inputs: this round's are not in the shared buffers yet
            refill()
        return session.sample()

    def check(index: int) -> None:
        start = _perf_counter()
        ok, fig = correctness.compare(session.outputs(), state["ref"], job["atol"], job["rtol"])
        state["check_s"] += _perf_counter() - start
        state["checked"], state["count"] = index, state["count"] + 1
        if not ok:
            raise Verdict("incorrect", f"timed call {index + 1}: {fig['message']} (its inputs were fresh, "
                                       "and the outputs of earlier calls were right)")

    def after(index: int) -> None:
        if cheap or index in forced or rng.random() < RECHECK_SHARE:
            check(index)

    # Eager first in every round, as in calibration: the judge's sample follows its own input refresh and the
    # candidate's follows the judge's sample. Alternating would put the judge's sample right after the candidate's
    # call in every other round, which on the H100 made it bimodal (about 3% apart), so that its median wandered and
    # sampling ran to --max-time.
    def measure() -> tuple[dict[str, Any], float, int, float, int]:
        pid, group, own = session.cand.proc.pid, session.cand.pgid, escapes.own_helpers()
        start, tree = _perf_counter(), escapes.tree_cpu(pid, group, own=own)
        found = guarded(device, "timing", lambda: timing.measure_rounds(
            {"eager": eager, "solution": solution}, policy, before_round=before, after_round=after,
            alternate=False), judge_work="timing (the judge's inputs, reference calls and rechecks)")
        end = escapes.tree_cpu(pid, group, own=own)
        return (found, *escapes.escaped_cpu(tree, end), _perf_counter() - start, len(tree.gpu | end.gpu))

    (measured, escaped_s, escaped_n, window, gpu_holders), machine_figures, busy = machine.watched(
        measure, device, own_processes=2)
    if (escaped := escapes.escaped_warning(escaped_s, escaped_n, window, gpu_holders)) is not None:
        busy = [escaped, *busy]
    rounds = len(measured["solution"].samples)
    if state["checked"] != rounds - 1:
        check(rounds - 1)
    figures = {"rounds": rounds, "rechecked": state["count"], "recheck_every_call": cheap, "primed": primed,
               "refresh_s": round(state["refresh_s"], 4), "recheck_s": round(state["check_s"], 4),
               "calibration_p50_s": calibration.p50, "calibration_p90_s": calibration.p90}
    return measured, figures, machine_figures, busy


def seals(device: str) -> bool:
    """Whether timed rounds write their inputs sealed (kbench.judge.sealing): on a GPU, where work a frozen process queued
    keeps running. On the CPU a frozen process runs nothing (its escaped processes are counted: kbench.system.escapes), and
    drawing a key there costs about 2 ms per MB."""
    return device == "cuda"


def primed_rounds(device: str, calibration: timing.Calibration) -> bool:
    """Whether timing rounds are primed (see `_time`): on a GPU, for a reference whose calls are launch-bound."""
    return device == "cuda" and calibration.reference_launch_bound


def _copied(values: list[Any], into: list[Any] | None) -> list[Any]:
    """values copied into `into`, the judge's second set of inputs (made on first use: a timing has one size)."""
    if into is None:
        return correctness.clone_inputs(values)
    for value, slot in zip(values, into):
        if isinstance(value, torch.Tensor):
            slot.copy_(value)
    return into


def _finish(session: Session, result: dict[str, Any]) -> None:
    """Ask the candidate what it changed in its process; the findings become warnings (see evaluation.SUSPECT_CODES)."""
    try:
        figures = session.ask(protocol.Finish()).figures
    except Verdict:
        return
    patched = [p for p in figures.get("patched", []) if isinstance(p, str)]
    if patched:
        result["warnings"].append(f"[monkey_patch] the solution replaced {', '.join(patched)} "
                                  "(its calls are judged in another process, timed with the originals)")
    clocks = [p for p in patched if p in TIMING_CLOCKS]
    if clocks:
        result["warnings"].append(f"[clock_patched] the solution replaced {', '.join(clocks)} in its process, "
                                  "where its own calls are timed")
    changes = [c for c in figures.get("state_changes", []) if isinstance(c, str)]
    if changes:
        result["warnings"].append(f"[state_changed] the solution changed process-wide settings: {'; '.join(changes)} "
                                  "(restored before each call)")

