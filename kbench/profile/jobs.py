"""The profile target's protocol: the job the parent writes for it, the result it writes back (both JSON files)."""

from __future__ import annotations

from dataclasses import dataclass

from kbench.config.run_config import MathFlags
from kbench.results.records import Status
from kbench.wire.jobs import ProblemRef


@dataclass(frozen=True)
class TargetJob:
    """One model's profiled call: eager (`solution` None) or the solution at `solution` (a file), built as the judge
    builds it (the reference seeded with `seed`, its weights copied into ModelNew; inputs drawn with `seed`)."""

    problem: ProblemRef
    solution: str | None
    seed: int
    precision: str = "fp32"
    math: MathFlags = MathFlags()
    warmup_calls: int = 3
    device: str = "cuda"


@dataclass(frozen=True)
class TargetResult:
    """How the target ended: `failure` None when the profiled call ran; the sandbox level it ran under, and why."""

    failure: Status | None = None
    message: str = ""
    sandbox: str = ""
