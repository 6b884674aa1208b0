"""Frozen problem and solution specs and result records: what a run is asked to judge and what it found."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from kbench.config.tolerances import DEFAULT_TOLERANCE, PRECISIONS
from kbench.results import stats
from kbench.results.codec import JsonObject, decode, to_wire
from kbench.results.diagnostics import Diagnostics
from kbench.results.figures import Accuracy, Floor, KernelShare, PeakMemory
from kbench.results.findings import Finding, FindingCode


class Status(str, Enum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    LOAD_ERROR = "load_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NOT_RUN = "not_run"
    SUSPECT = "suspect"  # the outputs pass, but the timing cannot be trusted

    def __str__(self) -> str:
        return self.value


def problem_order(name: str) -> tuple[tuple[int, int | str], ...]:
    """A problem name's sort key, numbers as numbers: L2_2 before L2_10 before L2_100 (text order put L2_100 first)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


# A problem's module-level size constants by name, each with its value (an int, a float, a tuple of them, ...) as the
# problem file's AST or problem.toml gives it: what a size sets before the problem's inputs are made.
SizeOverrides = dict[str, Any]

# Names of the two rows every problem gets besides its solutions.
EAGER = "eager"
COMPILED = "torch.compile"


@dataclass(frozen=True)
class ProblemSpec:
    """A KernelBench-format problem file plus the metadata kbench needs to judge it."""

    name: str
    path: Path
    origin: str = "user file"
    atol: float = DEFAULT_TOLERANCE
    rtol: float = DEFAULT_TOLERANCE
    precision: str = "fp32"  # the precision a run takes when --precision does not say (problem.toml `precision`)
    backward: bool = False  # forward and backward judged as one call unless --forward-only (problem.toml `backward`)
    constants: tuple[tuple[str, Any], ...] = ()  # module-level size constants, read from the AST
    small: tuple[tuple[str, Any], ...] = ()  # overrides of those constants for --size small

    @property
    def has_small(self) -> bool:
        return bool(self.small)

    def overrides(self, size: str) -> SizeOverrides:
        """Explicit values of the size constants that differ between sizes, for `size`."""
        if size == "small":
            return dict(self.small)
        full = dict(self.constants)
        return {name: full[name] for name, _ in self.small}


@dataclass(frozen=True)
class SolutionSpec:
    """A file defining ModelNew for one problem."""

    problem: str
    name: str
    path: Path
    devices: tuple[str, ...] = ("cuda",)
    precisions: tuple[str, ...] = tuple(PRECISIONS)  # those it declares (`PRECISIONS = ("fp32",)`); default all
    defect: str = ""  # why the file cannot load, seen without running it (a syntax error, no ModelNew): its load_error


class Regime(str, Enum):
    """What a timed call's samples include (docs/timing.md); a record stores its value ("" where none was recorded)."""

    GPU = "gpu"  # the call issued behind a closed gate: the events time its GPU work alone
    HOST = "host"  # the call issued with the GPU idle (or on the CPU): the time includes the host's issuing it

    @property
    def words(self) -> str:
        """What a row timed in this regime measured, as a report's provenance says it."""
        return REGIME_WORDS[self]


REGIME_WORDS = {
    Regime.GPU: "the GPU regime (the call's GPU time, issued behind a gate, as do_bench measures)",
    Regime.HOST: "the host regime (the host's issue time included: launch-bound calls, and every CPU row)",
}


@dataclass(frozen=True)
class Measurement:
    """Raw per-call samples (seconds) of one callable; every statistic is derived from them."""

    samples: tuple[float, ...]
    host_samples: tuple[float, ...] = ()
    stop_reason: str = ""
    judge_samples: tuple[float, ...] = ()  # the judge's clock over each round trip, for a call timed in another process
    issue_samples: tuple[float, ...] = ()  # host seconds to issue each call's work (CUDA; see timers.CudaEventTimer)
    # What the samples include: a Regime's value (the GPU work alone, or the host's time to issue it too: launch-bound
    # calls, calls that wait for the GPU, the CPU); "" unknown.
    regime: str = ""

    @property
    def median(self) -> float:
        return stats.median(self.samples)

    def summary(self) -> dict[str, float]:
        return stats.summarize(self.samples)

    def to_json(self) -> JsonObject:
        """As run.json keeps it: the codec's fields (kbench.results.codec), with `for_reader` beside them."""
        return {**to_wire(self, Measurement), **self.for_reader()}

    def for_reader(self) -> JsonObject:
        """The samples' statistics, written beside them for a reader of run.json (derived, ignored when read back)."""
        return {"unit": "s", **self.summary()}

    @classmethod
    def from_json(cls, data: JsonObject) -> Measurement:
        return decode(cls, data)


@dataclass(frozen=True)
class TrialResult:
    """One correctness trial: a fresh input seed, candidate output against reference output."""

    seed: int
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatched: int | None = None
    numel: int | None = None
    chunks: int | None = None  # pieces the comparison took the output in, to stay within its memory budget
    message: str = ""


@dataclass(frozen=True)
class CompileInfo:
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    log: str = ""
    cache_key: str = ""


@dataclass(frozen=True)
class Speedups:
    """A row's speedups: eager's median over the row's, and that over torch.compile's gain (eager's median over
    torch.compile's), each None where a median is missing."""

    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None

    @classmethod
    def of(cls, timing: Measurement | None, eager: Measurement | None, compile_gain: float | None) -> Speedups:
        if timing is None or eager is None or not timing.median:
            return cls()
        vs_eager = eager.median / timing.median
        return cls(vs_eager, vs_eager / compile_gain if compile_gain else None)


@dataclass(frozen=True)
class Evaluation:
    """The verdict for one problem x one solution (or the eager / torch.compile reference rows): the one record of an
    evaluation. The judge fills it (kbench.judge.draft) and sends it as its result; the parent adds what was
    evaluated and where (problem, solution, device, size, precision, the build, the placement). A measured figure is
    a field here: set where it is measured, it reaches run.json, the tables and the HTML from this record."""

    problem: str = ""
    solution: str = ""
    status: Status = Status.NOT_RUN
    device: str = ""
    size: str = ""
    message: str = ""
    compile: CompileInfo | None = None
    precision: str = "fp32"
    backward: bool = False  # forward and backward judged and timed as one call (--backward)
    trials: tuple[TrialResult, ...] = ()
    size_checks: dict[str, tuple[TrialResult, ...]] = field(default_factory=dict)  # trials at other sizes
    timing: Measurement | None = None
    eager_timing: Measurement | None = None  # eager reference timed in the same child, interleaved
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    withheld: Speedups | None = None  # a `suspect` row's speedups, shown as withheld and counted nowhere
    warnings: tuple[Finding, ...] = ()
    seconds: float = 0.0  # wall time of the whole evaluation, child start to result
    floor: Floor | None = None  # the problem's hardware floor on this GPU (on the eager row)
    percent_of_floor: float | None = None  # the floor's time as a percentage of this row's median
    accuracy: Accuracy | None = None  # max error against float64 (solutions)
    kernels: KernelShare | None = None  # the solution's own kernels' share of its GPU time
    peak: PeakMemory | None = None  # peak memory of a call: the solution's and the reference's
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step of the evaluation's child
    gpu: str | None = None  # the slot that ran it (a GPU index, a Ray task slot) when runs are spread out
    gpu_name: str | None = None  # that GPU's model, when runs are spread over the GPUs of this machine
    diagnostics: Diagnostics = field(default_factory=Diagnostics)  # the timing protocol, the machine, the processes
    # what an older run file recorded that no field holds (kbench.results.migrate keeps it; nothing reads it)
    extra: JsonObject = field(default_factory=dict)

    @property
    def flags(self) -> tuple[FindingCode, ...]:
        """The codes of the warnings, e.g. (FindingCode.NON_DETERMINISTIC, FindingCode.MONKEY_PATCH)."""
        return tuple(f.code for f in self.warnings)

    @property
    def max_abs_err(self) -> float | None:
        errs = [t.max_abs_err for t in self.trials if t.max_abs_err is not None]
        return max(errs) if errs else None

    def to_json(self) -> JsonObject:
        """The row as run.json keeps it: the codec's JSON (kbench.results.codec), each timing with its statistics."""
        out = to_wire(self, Evaluation)
        for key, measured in (("timing", self.timing), ("eager_timing", self.eager_timing)):
            if measured is not None:
                out[key].update(measured.for_reader())
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> Evaluation:
        """A row of a run file of the current version (kbench.results.migrate brings older ones up to it), checked
        field by field by the codec; it names what it evaluated (a ValueError when it does not)."""
        missing = [name for name in ("problem", "solution", "status") if name not in data]
        if missing:
            raise ValueError(f"a row without {', '.join(missing)}")
        return decode(cls, data)
