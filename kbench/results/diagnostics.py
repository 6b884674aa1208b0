"""What a row's child recorded beyond its verdict and its figures: how its timing went (the protocol's rounds, the
witness, the divisor, a timing done again), the machine meanwhile, the candidate processes tried, the sandbox, and for
the eager row the reference's output and noise. Typed records, written to run.json as `diagnostics` and read back by
the reports (run files before version 4 kept them as free-form `extra`; kbench.results.migrate moves them here).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuState:
    """The timed GPU right after the timing (NVML, else nvidia-smi): SM clock and its maximum (MHz), the active
    throttle reasons, how many processes held a context on it and how many of those were kbench's own outside the
    judge (the slot's next worker, started ahead). A field neither source gave is None."""

    sm_mhz: int | None = None
    max_sm_mhz: int | None = None
    throttled: tuple[str, ...] = ()
    compute_processes: int | None = None
    kbench_elsewhere: int = 0


@dataclass(frozen=True)
class MachineState:
    """What the machine did while a row was timed: other processes' CPU time per second (`other_cores`), the load
    average at the start, the window and the core count (None where /proc could not be read), the clock of the one
    core the timing ran on right after it (`core_mhz`, where the kernel reports it); on CUDA the GPU."""

    other_cores: float | None = None
    load_average: float | None = None
    window_s: float | None = None
    cores: float | None = None
    gpu: GpuState | None = None
    core_mhz: float | None = None


@dataclass(frozen=True)
class RegimeDecision:
    """What decided a solution's regime: the judge's clock over its first gated calls (issue and GPU time, seconds),
    or why no calls decided it."""

    why: str = ""
    issue_s: float | None = None
    gpu_s: float | None = None


@dataclass(frozen=True)
class WitnessFigures:
    """The witness (a candidate process holding only the reference, timed in the same rounds): how many rounds it
    gave, why it failed if it did, the protocol's cost for it and its reported time (medians, seconds)."""

    rounds: int = 0
    failure: str | None = None
    p50_s: float | None = None
    verify_p50_s: float | None = None
    timed_p50_s: float | None = None


@dataclass(frozen=True)
class Divisor:
    """What a speedup divided by when not the judge's eager: the witness's calls (`by`), how many, their median and
    the judge's eager median beside them (seconds)."""

    by: str
    calls: int
    witness_p50_s: float
    judge_eager_p50_s: float


@dataclass(frozen=True)
class PlacementFigures:
    """A row whose memory both sides drew anew every `rounds` rounds (kbench.judge.timing.placement): the draws made
    (beyond the first PROBE_GROUPS only where a side's speed moved), the groups of `rounds` samples, each side's
    groups kept in its headline, the spread of each side's draw speeds (each draw's fastest sample, slowest over
    fastest) and each side's samples left out (seconds, in the order taken)."""

    rounds: int = 0
    draws: int = 0
    groups: int = 0
    solution_groups_kept: int = 0
    eager_groups_kept: int = 0
    solution_spread: float = 1.0
    eager_spread: float = 1.0
    solution_dropped: tuple[float, ...] = ()
    eager_dropped: tuple[float, ...] = ()
    # the groups left out of each side's headline, by their place in the rounds (0: the first draw's): a group left
    # out on both sides is a stretch of slow rounds (the machine's), one on a single side that side's memory
    solution_dropped_groups: tuple[int, ...] = ()
    eager_dropped_groups: tuple[int, ...] = ()
    # the side ("solution" or "eager") that ran at the other's slow speed on every draw it made (placement.stuck):
    # the solution is timed again in a fresh candidate process, and the row is `suspect` if it stays so
    stuck: str = ""

    @property
    def left_out(self) -> bool:
        """Whether either side's speed moved with its memory: a draw of it left out of its headline."""
        return self.solution_groups_kept < self.groups or self.eager_groups_kept < self.groups


@dataclass(frozen=True)
class TimingSpend:
    """Where the judge's seconds of a solution's timing went, outside the samples' own time: deciding the regime,
    the warm-up calls, the memory draws (a part of `TimingProtocol.refresh_s`), the settle after each round's
    inputs, the judge's eager calls, the solution's timed calls as the judge's clock saw them from the Arm request to
    the report (of them: `switch_s` thawing and freezing the candidate, `arm_s` its Arm requests, `window_s` the
    judge's windows from the release to the outputs verified), and the witness's calls."""

    decide_s: float = 0.0
    warmup_s: float = 0.0
    draws_s: float = 0.0
    settle_s: float = 0.0
    eager_s: float = 0.0
    solution_s: float = 0.0
    switch_s: float = 0.0
    arm_s: float = 0.0
    window_s: float = 0.0
    witness_s: float = 0.0


@dataclass(frozen=True)
class TimingProtocol:
    """The timing protocol's figures of a solution's rounds (docs/timing.md): rounds and outputs rechecked, the
    regime and what decided it, the seconds the protocol spent, the calibration's cost and what the judge's own
    clock saw (medians, seconds), the witness and the divisor where there were, and a first timing's flag when the
    rounds were timed again."""

    rounds: int = 0
    rechecked: int = 0
    recheck_every_call: bool = False
    primed: bool = False
    regime: str = ""
    regime_decision: RegimeDecision = RegimeDecision()
    eager_regime: str = ""
    refresh_s: float = 0.0
    recheck_s: float = 0.0
    calibration_p50_s: float | None = None
    verify_s: tuple[float, ...] = ()  # per call of the rounds: the judge's clock from the signal to the outputs checked
    calibration_verify_p50_s: float | None = None
    judged_issue_s: float | None = None
    judged_gpu_s: float | None = None
    witness: WitnessFigures | None = None
    divisor: Divisor | None = None
    retimed: str | None = None  # the finding that had the rounds timed again ("[code] message")
    placements: PlacementFigures | None = None  # each side's memory drawn anew every few rounds (timing.placement)
    # With KBENCH_JUDGE_BRACKET=1 (a measurement): per gated call of the rounds, the judge's own GPU bracket less the
    # reported time, and the calibration's median of the same (kbench.judge.timing.timed_call)
    bracket_excess_s: tuple[float, ...] = ()
    calibration_bracket_p50_s: float | None = None
    spent: TimingSpend | None = None  # where the timing's seconds went (the samples' own and the rest)


@dataclass(frozen=True)
class ProcessCheck:
    """The candidate's process against the judge's on the same reference call: the ratio of each process tried
    (None where too few calls), and how many fresh ones replaced one that disagreed."""

    ratios: tuple[float | None, ...] = ()
    fresh_candidates: int = 0
    disagrees: bool = False  # the last process tried still disagreed (`[processes_disagree]`, the row `suspect`)
    # After the solution's rounds: the reference kept in the candidate's process, timed there on the memory the
    # solution's calls had used, over the judge's eager of the same rounds (kbench.judge.timing.judge_timing.after)
    after: float | None = None
    after_disagrees: bool = False  # that check found the two apart (`[processes_disagree]`, the row `suspect`)
    after_unmeasured: bool = False  # that check timed too few calls to tell (`[processes_unchecked]`, `suspect`)
    after_retries: int = 0  # fresh candidate processes the solution was timed in again after that check disagreed


@dataclass(frozen=True)
class ReferenceNoise:
    """The reference's own error against float64 at the run's precision and tolerance, and whether an exact result
    passes at that tolerance (its cause when it does not)."""

    precision: str
    atol: float
    rtol: float
    max_abs: float
    exact_passes: bool
    cause: str | None = None


@dataclass(frozen=True)
class Degeneracy:
    """Can the problem tell right from wrong: the share of outputs a constant (the mean) passes, the share exactly
    zero, the outputs' standard deviation."""

    constant_pass_share: float
    zero_share: float
    output_std: float


@dataclass(frozen=True)
class ReferenceOutput:
    """What the reference returns: its first output's shape and dtype (a tensor) or type name, and its degeneracy."""

    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    type: str | None = None
    degeneracy: Degeneracy | None = None


@dataclass(frozen=True)
class Diagnostics:
    """A row's diagnostics (each None where its child did not record it): a solution's timing protocol, process
    check, sandbox level and weights copied; the eager row's output, noise, priming and each model's regime; the
    machine for both."""

    protocol: TimingProtocol | None = None
    machine: MachineState | None = None
    processes: ProcessCheck | None = None
    sandbox: str | None = None  # the sandbox level the candidate ran at (kbench.system.sandbox)
    state_dict_tensors_copied: int | None = None
    output: ReferenceOutput | None = None
    noise: ReferenceNoise | None = None
    primed: bool | None = None  # the eager row: its calls timed second, after a first that paid a one-off cost
    regimes: dict[str, str] = field(default_factory=dict)  # the eager row: each model's timing regime
