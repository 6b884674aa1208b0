"""What a finished measurement says beyond its median: the timing protocol's warnings and the calibration record.

Plain Python over recorded samples (no torch): importing it imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kbench.config.run_config import TimingPolicy
from kbench.results.diagnostics import PlacementFigures
from kbench.results.findings import Finding, FindingCode
from kbench.results.records import Measurement, Regime
from kbench.results.stats import mann_whitney_u, median

STOP_CONVERGED = "converged"
STOP_MAX_TIME = "max_time"
STOP_STUCK = "stuck"  # a side's memory draws stuck at the other's slow speed: the row is timed again or `suspect`


def few_samples_warning(m: Measurement, policy: TimingPolicy) -> Finding | None:
    """A warning when --max-time ended sampling before the minimum sample count: the median is shaky."""
    if m.stop_reason == STOP_MAX_TIME and len(m.samples) < policy.min_samples:
        return (Finding(FindingCode.FEW_SAMPLES, f"only {len(m.samples)} sample(s) before the "
                f"{policy.max_time_s:g} s cap (minimum {policy.min_samples}); raise --max-time for a reliable median"))
    return None


def measurement_warnings(m: Measurement | None, policy: TimingPolicy, device: str) -> list[Finding]:
    """What a finished measurement's samples warn of: fewer than the minimum (`few_samples_warning`); on CUDA, work
    outside the timed stream, for a timing the judge did not check with its own clock (`escaped_work_warning`), and
    calls that are launch-bound (`launch_bound_warning`)."""
    if m is None:
        return []
    found = [few_samples_warning(m, policy)]
    if device == "cuda":
        found += [escaped_work_warning(m) if not m.judge_samples else None, launch_bound_warning(m)]
    return [f for f in found if f is not None]


# Host time above event time by both margins means work ran outside the timed stream.
HOST_EXCESS_ABS_S = 100e-6
HOST_EXCESS_REL = 0.5


def escaped_work_warning(m: Measurement, baseline_s: float = 0.0) -> Finding | None:
    """A warning when the host clock saw much more time than the events did (e.g. a side stream). `baseline_s` is the
    excess a call without escaped work shows (for a candidate: its calibration's, which includes the GPU's switch
    between the judge's and the candidate's contexts)."""
    if not m.host_samples:
        return None
    timed, wall = m.median, median(m.host_samples)
    excess = wall - timed - baseline_s
    if excess > HOST_EXCESS_ABS_S and excess > HOST_EXCESS_REL * timed:
        return (
            Finding(FindingCode.ESCAPED_TIMER, f"host time {wall * 1e3:.3f} ms exceeds event time "
            f"{timed * 1e3:.3f} ms: work may run outside the timed stream, so the event time may be too low")
        )
    return None


# The judge's own clock bounds a candidate's reported time (docs/timing.md): its window over each timed call,
# from the release of the round's inputs to the outputs seen, less the reported time, is what the protocol costs. A
# median of that excess above the calibration's (the reference itself timed through the same protocol before the
# solution was imported) by more than these bounds, and significantly, means the reported time is too low.
TIMER_BOUND_REL = 0.05  # of the reported median: a shave of 10% or more stands out (the ownership rule) ...
# ... above the absolute floor: on the H100 the protocol's cost differed by up to 48 us between candidate processes
# of one run (2026-11-27), so a shave below some tens of microseconds a call is not resolved (docs/timing.md).
TIMER_BOUND_ABS_S = 20e-6  # the least excess that counts on a GPU (the protocol's jitter there, measured on the H100)
TIMER_BOUND_ABS_CPU_S = 250e-6  # the least on the CPU, where the host's scheduling moves more
# Mann-Whitney: the excess must differ from the calibration's this significantly for a first flag, which has the rounds
# timed again beside a witness (kbench.judge.timing.flags) and stays only if they confirm it at CONFIRM_P against
# the witness's calls of those rounds. At 1e-3 a 10% shave of a 0.37 ms call went unflagged on the H100 (2026-11-26);
# two stages keep an honest row's chance of ending flagged below either one of them.
TIMER_BOUND_P = 0.01
# After a first timing flagged at TIMER_BOUND_P, the rounds timed again confirm the flag at this level: a burst that
# opened the gap once does not reopen it beyond the bound in the same direction more than 1 time in 20, while a 10%
# shave that passed its second timing at 1e-3 was let through on the H100 (2026-11-26, two of three such fixtures).
CONFIRM_P = 0.05


@dataclass(frozen=True)
class Calibration:
    """What the protocol costs beyond the reported time, from the reference timed through the candidate's process
    before the solution was imported, per regime, and the judge's own eager samples of the same rounds."""

    # the judge's window minus the reported time, per call, in each regime calibrated (on the CPU only the host's)
    overheads: Mapping[Regime, tuple[float, ...]] = field(default_factory=dict)
    eager: tuple[float, ...] = ()  # the judge's eager samples in the same rounds (a trusted neighbour)
    eager_issue: tuple[float, ...] = ()  # the host seconds each of the judge's eager calls took to issue
    arm_overhead: tuple[float, ...] = ()  # the judge's clock over arming a gated call, less the call's issue time
    eager_regime: Regime | None = None  # the regime of the judge's eager timing (the reference's, decided by it)
    verify: tuple[float, ...] = ()  # the judge's clock from the candidate's signal to its outputs verified
    # the reference's own times as the candidate's process reported them, in the regime of the judge's eager samples
    # (`eager`, the same rounds): the same call in the two processes (`processes_disagree`)
    reference: tuple[float, ...] = ()
    # the judge's GPU bracket less the reported time, per gated call (timed_call.BRACKET_ENV; empty without it)
    bracket: tuple[float, ...] = ()
    forced: int = 0  # rounds left out because the candidate's call waited for the GPU while issued (judge_timing.after)

    @property
    def reference_launch_bound(self) -> bool:
        """Whether the judge times the reference in the host regime (its calls launch-bound, or waiting for the GPU)."""
        return self.eager_regime == Regime.HOST or (not self.eager_regime and issue_bound(self.eager_issue, self.eager))

    def excess(self, regime: str) -> tuple[float, ...]:
        """The protocol's cost per call in `regime` (empty where that regime was not calibrated); a measurement that
        names no regime was timed by the host's clock."""
        return self.overheads.get(Regime(regime) if regime else Regime.HOST, ())

    def bound(self, timed_median: float, cpu: bool = False) -> float:
        """How far the excess may sit above the calibration's before it counts."""
        return max(TIMER_BOUND_ABS_CPU_S if cpu else TIMER_BOUND_ABS_S, TIMER_BOUND_REL * timed_median)


def excess(m: Measurement) -> list[float]:
    """The judge's window minus the reported time, per sample (empty where the judge did not time the call)."""
    if not m.judge_samples or len(m.judge_samples) != len(m.samples):
        return []
    return [j - t for j, t in zip(m.judge_samples, m.samples)]


def timer_mismatch_warning(m: Measurement, calibration: Calibration, cpu: bool = False,
                           p: float = TIMER_BOUND_P) -> Finding | None:
    """`[timer_mismatch]` when the judge's clock saw significantly more than the reported time plus what the protocol
    costs in the measurement's regime.

    The candidate reports its time from the solution's process, where anything can be replaced; the judge's window
    over each call cannot be. A call cannot take less than it reports plus the protocol's cost, so an excess beyond
    the calibrated one by more than `Calibration.bound` (Mann-Whitney p below `p`: TIMER_BOUND_P, or CONFIRM_P when
    the rounds are timed again after a first flag) means the reported time is too low: a shadowed timer, a made-up
    number, or work the events missed.
    """
    found, base = excess(m), calibration.excess(m.regime)
    gap = _beyond(found, base, calibration.bound(m.median, cpu), p)
    if gap is None:
        return None
    return (Finding(FindingCode.TIMER_MISMATCH, "the judge's clock saw "
            f"{median(m.judge_samples) * 1e3:.3f} ms per timed call, the candidate reported {m.median * 1e3:.3f} ms, "
            f"and the protocol accounts for {median(base) * 1e3:.3f} ms "
            f"(+{calibration.bound(m.median, cpu) * 1e3:.3f} ms): the reported time is {gap * 1e3:.3f} ms too low"))


def _beyond(found: Sequence[float], base: Sequence[float], bound: float, p: float = TIMER_BOUND_P) -> float | None:
    """How far the median of `found` lies above `base`'s, if by more than `bound` and significantly (Mann-Whitney p
    below `p`), else None."""
    if not found or not base:
        return None
    gap = median(found) - median(base)
    if gap <= bound or mann_whitney_u(found, base)[1] >= p:
        return None
    return gap


def unfinished_warning(verify: Sequence[float], timed_median: float, calibration: Calibration,
                       cpu: bool = False, p: float = TIMER_BOUND_P) -> Finding | None:
    """`[unfinished_work]` when verifying the outputs took the judge significantly longer after the candidate's signal
    than in calibration: the judge's reads wait for the candidate's work still running (the GPU runs one process's
    work at a time), so work ran past the signal that ended the judge's window, and the reported time leaves it out."""
    gap = _beyond(verify, calibration.verify, calibration.bound(timed_median, cpu), p)
    if gap is None:
        return None
    return (Finding(FindingCode.UNFINISHED_WORK, "after the solution signalled each call done, its outputs took "
            f"the judge {median(verify) * 1e3:.3f} ms to verify, {gap * 1e3:.3f} ms more than calibrated: work ran "
            "past the signal, outside the reported time"))


# The judge's eager samples beside the solution against those beside the trusted calibration candidate (the
# reference itself): slower by this much, and significantly, means the solution's process reached the reference.
DISTURBED_RATIO = 1.15
DISTURBED_P = 0.01


def disturbed_warning(beside: Measurement, calibration: Calibration) -> Finding | None:
    """`[reference_disturbed]` when the eager reference ran much and significantly slower beside the solution than
    beside the calibration candidate, under the same protocol: work of the solution's (GPU work it queued before its
    process was frozen, say) reached the reference's timed calls.

    Not for a launch-bound reference (`launch_bound_warning`): its time is the judge's host issuing launches, which
    varied by up to 1.8x between processes and phases on the H100 for honest copies of level-3 models (the frozen
    candidate cannot use the CPU, and GPU work it left behind would lengthen the GPU time, making the calls no
    longer launch-bound)."""
    if not beside.samples or not calibration.eager or launch_bound_warning(beside) is not None:
        return None
    ratio = beside.median / median(calibration.eager)
    if ratio <= DISTURBED_RATIO or mann_whitney_u(beside.samples, calibration.eager)[1] >= DISTURBED_P:
        return None
    return (Finding(FindingCode.REFERENCE_DISTURBED, f"the eager reference took {beside.median * 1e3:.3f} ms beside "
            f"the solution and {median(calibration.eager) * 1e3:.3f} ms beside the reference itself ({ratio:.2f}x): "
            "something slowed the reference while it was timed"))


# The same call timed in the judge's process and in the candidate's (calibration, before the solution is imported)
# this far apart, and significantly: the two processes run it at different speeds, and a speedup divided by the
# judge's eager would carry that difference (on a 4-GPU H200 machine an honest copy read 0.77x, `correct`, its
# candidate's process running the reference at 6.4 ms and the judge's at 4.9 ms). The band is the one an honest copy
# must read within.
PROCESS_TOLERANCE = 0.03
PROCESS_P = 0.01


def processes_disagree(calibration: Calibration) -> float | None:
    """The ratio of the candidate process's time of the reference to the judge's (medians of the calibration's
    rounds, in the judge's regime) when it lies outside 1 +- PROCESS_TOLERANCE and the two differ significantly
    (Mann-Whitney p < PROCESS_P); None when they agree or either has too few samples."""
    ratio = process_ratio(calibration)
    if ratio is None or abs(ratio - 1.0) <= PROCESS_TOLERANCE:
        return None
    if mann_whitney_u(calibration.reference, calibration.eager)[1] >= PROCESS_P:
        return None
    return ratio


def process_ratio(calibration: Calibration) -> float | None:
    """The candidate process's median time of the reference over the judge's, in the calibration's rounds (None
    with fewer than PROCESS_MIN_SAMPLES of either)."""
    cand, judge = calibration.reference, calibration.eager
    if len(cand) < PROCESS_MIN_SAMPLES or len(judge) < PROCESS_MIN_SAMPLES or median(judge) <= 0:
        return None
    return median(cand) / median(judge)


PROCESS_MIN_SAMPLES = 5


def processes_warning(ratio: float, tries: int) -> Finding:
    """`[processes_disagree]`: the judge's and the candidate's processes ran the reference at different speeds, in
    each of `tries` candidate processes."""
    return Finding(FindingCode.PROCESSES_DISAGREE, f"the reference itself ran {ratio:.3f}x as long in the "
                   f"candidate's process as in the judge's (in each of the {tries} candidate processes tried, before "
                   "the solution was imported): a speedup divided by the judge's eager would carry that difference")


def after_warning(ratio: float) -> Finding:
    """`[processes_disagree]` found after the solution's rounds (kbench.judge.timing.judge_timing.after): the reference,
    on the memory the solution's calls had used in its process, ran at another speed than the judge's eager."""
    return Finding(FindingCode.PROCESSES_DISAGREE, f"after the solution's rounds the reference itself ran {ratio:.3f}x "
                   "as long in the candidate's process, on the memory the solution's calls had used, as in the "
                   "judge's: the speedup would carry where each process's memory lay")


def stuck_warning(drawn: PlacementFigures) -> Finding:
    """`[processes_disagree]`: one side ran at the other's slow speed on every memory draw it made
    (placement.stuck), in each candidate process tried."""
    side, other = ("the solution", "the eager reference") if drawn.stuck == "solution" else (
        "the eager reference", "the solution")
    spread = drawn.eager_spread if drawn.stuck == "solution" else drawn.solution_spread
    return Finding(FindingCode.PROCESSES_DISAGREE, f"{side} ran as slow as {other}'s slow memory on every one of its "
                   f"{drawn.groups} memory draws, where {other} also drew memory {spread:.2f}x faster (in each "
                   "candidate process tried): the speedup would carry where each side's memory lay")


def after_unmeasured_warning(found: Calibration) -> Finding:
    """`[processes_unchecked]`: the check after the solution's rounds timed too few calls of the reference in the
    candidate's process to compare the two processes (its calls waited for the GPU while issued, `found.forced`)."""
    why = (f"{found.forced} of its calls waited for the GPU while they were issued" if found.forced else
           "too few of its calls were kept: each side keeps only its calls on the fastest memory it drew")
    return Finding(FindingCode.PROCESSES_UNCHECKED, "the reference could not be timed again in the candidate's "
                   f"process after the solution's rounds ({why}, in each candidate process tried): whether the "
                   "speedup carries where each process's memory lay is unknown")


def draws_disagree(rounds_eager: Measurement, calibration: Calibration) -> float | None:
    """Where the solution's rounds found a side's speed moving with its memory (kbench.judge.timing.placement): the
    judge's eager on its fastest draws in those rounds over the same in the check after them, when outside
    1 +- PROCESS_TOLERANCE and significant (Mann-Whitney p < PROCESS_P); None when they agree. Both are the judge's own:
    apart, one of them drew no fast memory in all its draws, and the speedup may divide by that."""
    after = calibration.eager
    if len(rounds_eager.samples) < PROCESS_MIN_SAMPLES or len(after) < PROCESS_MIN_SAMPLES or median(after) <= 0:
        return None
    ratio = rounds_eager.median / median(after)
    if abs(ratio - 1.0) <= PROCESS_TOLERANCE or mann_whitney_u(rounds_eager.samples, after)[1] >= PROCESS_P:
        return None
    return ratio


def draws_warning(ratio: float) -> Finding:
    """`[processes_disagree]` for the judge's own eager on its fastest draws, in the solution's rounds and after them
    (`draws_disagree`)."""
    return Finding(FindingCode.PROCESSES_DISAGREE, f"the judge's eager on the fastest memory it drew ran {ratio:.3f}x "
                   "as long in the solution's rounds as after them: one of the two drew no fast memory, and the "
                   "speedup would carry it")


# Two halves of a timing's samples (in the order they were taken) this far apart, and significantly: the level moved.
LEVEL_MOVED_RATIO = 1.10
LEVEL_MOVED_P = 0.01
LEVEL_MOVED_MIN_SAMPLES = 20


def level_moved_warning(m: Measurement, what: str) -> Finding | None:
    """`[level_moved]` when the second half of the samples sits at another level than the first: each half may be
    tight (a narrow confidence interval) while the machine's speed changed under the timing (another process
    started, the CPU's clock moved), so the median describes neither."""
    n = len(m.samples)
    if n < LEVEL_MOVED_MIN_SAMPLES:
        return None
    first, second = m.samples[: n // 2], m.samples[n // 2:]
    ratio = median(second) / median(first)
    if max(ratio, 1 / ratio) < LEVEL_MOVED_RATIO or mann_whitney_u(first, second)[1] >= LEVEL_MOVED_P:
        return None
    return (Finding(FindingCode.LEVEL_MOVED, f"{what}'s time moved from {median(first) * 1e3:.3f} ms in the first "
            f"half of its samples to {median(second) * 1e3:.3f} ms in the second ({ratio:.2f}x): the machine's speed "
            "changed while it was timed"))


# Issuing a call's work takes the host this share of the GPU time or more: the GPU waits on launches, and the time
# measures the host's launch overhead (Python, dispatch, driver) as much as the kernels.
LAUNCH_BOUND_SHARE = 0.8


def issue_bound(issue: Sequence[float], timed: Sequence[float]) -> bool:
    """Whether the host's median time to issue a call is at least LAUNCH_BOUND_SHARE of its median timed time."""
    return bool(issue) and bool(timed) and median(issue) >= LAUNCH_BOUND_SHARE * median(timed)


def launch_bound_warning(m: Measurement) -> Finding | None:
    """`[launch_bound]` when the host's time to issue a call comes close to the call's time (a time of the host regime,
    which holds the host's issuing: one of the GPU regime holds the GPU's work alone). The host may be issuing
    launches or waiting for the GPU inside the call; either way the time is the host's."""
    if not m.issue_samples or not m.samples or m.regime == Regime.GPU:
        return None
    issue = median(m.issue_samples)
    if issue < LAUNCH_BOUND_SHARE * m.median:
        return None
    return (Finding(FindingCode.LAUNCH_BOUND, f"the host spends {issue * 1e3:.3f} ms of the call's "
            f"{m.median * 1e3:.3f} ms issuing it (launches, Python, or a wait for the GPU inside the call: a "
            "synchronize, .item(), a copy from a Python number or pageable memory): the time is the host's, and "
            "follows the host CPU's speed (fewer, larger kernels, no wait inside the call or a CUDA graph would help)"))
