"""What a timing's figures flag (docs/timing.md), and the rounds timed again after a first flag: `[timer_mismatch]`,
`[unfinished_work]` and `[regime_changed]` have them timed again beside a witness (kbench.judge.timing.judge_timing),
and only the second rounds count."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from kbench.judge.timing import checks
from kbench.judge.timing.checks import Calibration
from kbench.judge.timing.judge_timing import TimedRounds
from kbench.results.diagnostics import TimingProtocol
from kbench.results.findings import Finding, FindingCode

Timed = TypeVar("Timed")
REGIME_SLACK = 1.25  # a GPU-regime row whose judged issue time later exceeds its GPU time this much was launch-bound


def timing_warnings(device: str, timed: TimedRounds, calibration: Calibration,
                    p: float = checks.TIMER_BOUND_P) -> list[Finding]:
    """What the timing's figures flag: a timer mismatch, a GPU-regime call that was launch-bound after all, and on
    CUDA a disturbed reference. `p`: the significance the judge's clock checks ask for (CONFIRM_P when the rounds
    are timed again after a first flag)."""
    found = [checks.timer_mismatch_warning(timed.solution, calibration, cpu=device == "cpu", p=p),
             checks.unfinished_warning(timed.protocol.verify_s, timed.solution.median, calibration,
                                       cpu=device == "cpu", p=p)]
    if device == "cuda":  # on the CPU the freeze covers a disturbed reference, and the noise there is larger
        found += [checks.disturbed_warning(timed.eager, calibration), regime_warning(timed.protocol)]
    return [w for w in found if w is not None]


def mismatch_check(device: str, calibration: Calibration) -> Callable[[TimedRounds, float], list[Finding]]:
    """The check `retime_mismatch` applies to each timing: its warnings (`timing_warnings`) against the calls of its
    witness when it had one (the second rounds), else against the calibration."""
    return lambda timed, p: timing_warnings(device, timed, timed.witness or calibration, p)


def regime_warning(protocol: TimingProtocol) -> Finding | None:
    """`[regime_changed]` when a call timed in the GPU regime took the host longer to issue, by the judge's clock,
    than REGIME_SLACK times its GPU time: it was launch-bound, whose time includes the host's (it behaved otherwise
    while its regime was decided)."""
    issue, gpu = protocol.judged_issue_s, protocol.judged_gpu_s
    if issue is None or gpu is None or issue <= REGIME_SLACK * max(gpu, 0.0):
        return None
    gpu_time = (f"whose GPU time is {gpu * 1e3:.3f} ms" if gpu > 0 else
                "whose GPU time is below what the judge's clock resolves")
    return (Finding(FindingCode.REGIME_CHANGED, "timed in the GPU regime, but the host took "
            f"{issue * 1e3:.3f} ms to issue each call {gpu_time} (by the judge's clock): "
            "a launch-bound call's time includes the host's"))


# The timing findings that have the rounds timed again: each compares the judge's clock with the calibration's, and
# the protocol's cost follows the host's speed, which moves between calibration and timing. On the H100 a burst of load
# gave `[unfinished_work]` by 0.12-0.15 ms on one honest row in 15, in two of three runs of bench/fidelity.py compare;
# the judge's verification of a launch-bound forward+backward (about 0.5 ms) sat at 1.0-1.1 ms for a stretch of rounds
# and at 1.4-1.7 ms for the next within one timing (2026-11-26). A witness in the same rounds shares such moves.
# A `[regime_changed]` has them timed again too, in the host regime: a call that was launch-bound after all gets a time
# with the host's in it, whether it behaved otherwise while its regime was decided or was misjudged from five calls
# (on the H100 a plain-PyTorch copy of a 20 us call was, 2026-11-26). Nothing is left for a regime to buy.
RETIMED = (FindingCode.TIMER_MISMATCH, FindingCode.UNFINISHED_WORK, FindingCode.REGIME_CHANGED)


def host_only_again(found: Sequence[Finding]) -> bool:
    """Whether rounds timed again after `found` go in the host regime: after a `[regime_changed]`."""
    return any(w.code == FindingCode.REGIME_CHANGED for w in found)


def retime_mismatch(timed: Callable[[], Timed], again: Callable[[list[Finding]], Timed],
                    check: Callable[[Timed, float], list[Finding]]) -> tuple[Timed, list[Finding], Finding | None]:
    """The timing, its warnings, and the first `[timer_mismatch]`, `[unfinished_work]` or `[regime_changed]` when
    there was one: then the rounds are timed again (`again(found)`: beside a witness, whose calls give the protocol's
    cost in the same rounds; in the host regime after a `[regime_changed]`, `host_only_again`) and only the second
    count. A burst of load or a drift of the host's speed reaches the witness's calls as much as the
    solution's, while a solution that under-reports, or leaves work running past its signal, does so again (or
    behaves honestly this time: either way the row's time is one it cannot have shaved unseen). `check(timing, p)`
    asks for significance `p`: TIMER_BOUND_P first, then CONFIRM_P, since the first flag already stands (a first flag
    thrown away would give a shaver two tries)."""
    measured = timed()
    found = check(measured, checks.TIMER_BOUND_P)
    first = next((w for w in found if w.code in RETIMED), None)
    if first is None:
        return measured, found, None
    measured = again(found)
    second = check(measured, checks.CONFIRM_P)
    if host_only_again(second) and not host_only_again(found):
        # Timed again in the GPU regime (the first flag was another), the call was launch-bound there: its time is
        # the host's, so it is timed once more, in the host regime, and that timing counts. A launch-bound call timed
        # in the GPU regime also shows the judge more than the reported time, so the second rounds' other flags are
        # the wrong regime's too; the third rounds' own checks, at CONFIRM_P, are what a shaver must pass. On an H200
        # a plain-PyTorch honest copy of a call of microseconds was `suspect` so (2026-11-28, docs/benchmarks.md).
        measured = again(second)
        second = check(measured, checks.CONFIRM_P)
    return measured, second, first
