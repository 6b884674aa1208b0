"""The parent <-> child protocol: one typed job goes to the child, one typed result comes back.

Both directions are frozen dataclasses, written as JSON and checked field by field where they are read
(kbench.results.codec): the child refuses a job that is not one of these records, the parent a result that is not the
record its job asks for (kbench.execution.child). A child that fails before it has a result answers with the result
record of its job holding only a status and a message, so every field but those two has a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

from kbench.config.run_config import MathFlags, TimingPolicy
from kbench.results.diagnostics import ReferenceNoise, ReferenceOutput
from kbench.results.figures import Floor
from kbench.results.findings import Finding
from kbench.results.header import Environment
from kbench.results.records import Evaluation, SizeOverrides, Status

# ---- jobs (parent -> child) -----------------------------------------------------------------------


@dataclass(frozen=True)
class ProblemRef:
    """A problem file at one size: `overrides` sets its module-level size constants."""

    name: str
    path: str
    overrides: SizeOverrides = field(default_factory=dict)


@dataclass(frozen=True)
class SolutionRef:
    name: str
    path: str


@dataclass(frozen=True)
class OtherSize:
    """A further size at which a solution's correctness is checked."""

    name: str
    overrides: SizeOverrides = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Judging:
    """What every job on a problem shares: the problem at its size and the run's settings for it."""

    problem: ProblemRef
    device: str
    precision: str = "fp32"
    seed: int
    trials: int
    atol: float
    rtol: float
    math: MathFlags = MathFlags()
    timing: TimingPolicy = TimingPolicy()
    kernel_profile: bool = True
    backward: bool = False  # forward and backward judged and timed as one call (kbench.judge.backward)


@dataclass(frozen=True, kw_only=True)
class ReferenceJob(Judging):
    """Time the eager reference (and torch.compile of it, checked first); on CUDA, its hardware floor."""

    mode: Literal["reference"] = "reference"
    compile_baseline: bool = True
    ceilings_dir: str | None = None  # where measured ceilings are cached; None: no floor


@dataclass(frozen=True, kw_only=True)
class EvaluateJob(Judging):
    """Judge one solution: this child becomes its judge; the solution runs in a candidate process it spawns."""

    mode: Literal["evaluate"] = "evaluate"
    solution: SolutionRef
    other_sizes: tuple[OtherSize, ...] = ()
    floor: Floor | None = None  # the problem's hardware floor, from its reference's child (kbench.measure.roofline)
    compile_gain: float | None = None  # eager's median over torch.compile's, from the same child


@dataclass(frozen=True, kw_only=True)
class CheckJob(Judging):
    """Can the problem tell right from wrong at its tolerance?"""

    mode: Literal["check"] = "check"


@dataclass(frozen=True)
class BuildJob:
    """Import a solution once so that its extensions compile into the cache."""

    solution: SolutionRef
    mode: Literal["build"] = "build"


@dataclass(frozen=True)
class ProbeJob:
    """Describe torch and the device as the child sees them."""

    mode: Literal["probe"] = "probe"


# Told apart by `mode` (each a different Literal), which pydantic reads when it checks an Envelope.
Job = ReferenceJob | EvaluateJob | CheckJob | BuildJob | ProbeJob


@dataclass(frozen=True)
class Envelope:
    """What the parent writes to a child's stdin: the job, the token its result line must carry, and the
    environment variables that differ between jobs (kbench.execution.child.JOB_ENV)."""

    job: Job
    token: str = ""
    env: dict[str, str] = field(default_factory=dict)


# ---- results (child -> parent) --------------------------------------------------------------------

# How a job that is not a row ended (a build, a problem's check, a probe): OK, or how it failed, as a row's failing
# Status (compile_error, load_error, timeout, crashed, ...; kbench.execution.child.answer makes those of a child that
# never answered).
OK: Literal["ok"] = "ok"
JobStatus = Union[Literal["ok"], Status]  # noqa: UP007 - pydantic reads the alias at run time on Python 3.10 too


@dataclass(frozen=True)
class ReferenceResult:
    """The reference's child's answer: the rows it filled (the eager row, then torch.compile's unless it was switched
    off), which the parent completes with what was evaluated and where; or, with no rows, how it failed."""

    status: Status
    message: str = ""
    rows: tuple[Evaluation, ...] = ()


@dataclass(frozen=True)
class CheckResult:
    status: JobStatus
    message: str = ""
    findings: tuple[Finding, ...] = ()
    output: ReferenceOutput | None = None  # what the reference returns, and whether it can tell right from wrong
    noise: ReferenceNoise | None = None


@dataclass(frozen=True)
class BuildJobResult:
    status: JobStatus
    message: str = ""
    seconds: float | None = None  # compile and link time, when the import built anything


@dataclass(frozen=True)
class ProbeResult:
    status: JobStatus
    message: str = ""
    environment: Environment | None = None  # kbench.system.environment.describe_torch's, checked on the pipe


# A solution's job is answered with its row itself (kbench.results.records.Evaluation), filled by the judge.
JobResult = ReferenceResult | Evaluation | CheckResult | BuildJobResult | ProbeResult

RESULT_OF: dict[str, type] = {"reference": ReferenceResult, "evaluate": Evaluation, "check": CheckResult,
                              "build": BuildJobResult, "probe": ProbeResult}


WIRE_TYPES: tuple[type, ...] = (Envelope, *RESULT_OF.values())  # what crosses the pipe, for codec.prepare


def result_type(job: Any) -> type:
    """The result record a job is answered with."""
    return RESULT_OF[job.mode]
