"""The run configuration: what a run is asked to do (devices, sizes, trials, tolerances, timing, where results go)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kbench.config.tolerances import tolerance


class ProblemSettings(Protocol):
    """What the configuration reads of a problem (kbench.results.records.ProblemSpec): its precision, tolerance and
    whether its calls are judged forward and backward."""

    @property
    def precision(self) -> str: ...

    @property
    def atol(self) -> float: ...

    @property
    def rtol(self) -> float: ...

    @property
    def backward(self) -> bool: ...


@dataclass(frozen=True)
class TimingPolicy:
    """When to stop sampling; see docs/timing.md."""

    warmup_calls: int = 3
    warmup_s: float = 0.025
    min_samples: int = 10
    min_time_s: float = 0.1
    max_time_s: float = 10.0
    rel_ci: float = 0.01  # stop once the median's 95% CI lies within +-1% of it


@dataclass(frozen=True)
class MathFlags:
    """Precision switches applied identically to reference and solution."""

    cudnn_tf32: bool = True  # PyTorch's default
    matmul_tf32: bool = False  # PyTorch's default

    @property
    def allows_tf32(self) -> bool:
        return self.cudnn_tf32 or self.matmul_tf32

    @classmethod
    def from_tf32(cls, tf32: bool) -> MathFlags:
        return cls() if tf32 else cls(cudnn_tf32=False, matmul_tf32=False)


@dataclass(frozen=True)
class RunConfig:
    device: str = "auto"  # auto | cuda | cpu
    size: str | None = None  # full | small; None picks full on CUDA, small on CPU
    trials: int = 5
    seed: int = 42
    atol: float | None = None  # None keeps each problem's own tolerance
    rtol: float | None = None
    math: MathFlags = MathFlags()
    compile_baseline: bool = True
    two_sizes: bool | None = None  # correctness at full and small; None: yes on CUDA, no on CPU
    timeout_s: float = 900.0
    jobs: int = 0  # 0 = one per CPU core
    timing: TimingPolicy = TimingPolicy()
    results_dir: Path = Path("results")
    cache_dir: Path | None = None
    executor: str = "local"  # local | ray
    address: str | None = None  # Ray cluster address; None starts a local Ray instance
    parallel: int | None = None  # evaluations at once under Ray (default: the cluster's GPUs; 1 on CPU)
    kernel_profile: bool = True  # the own-kernel share check (CUDA; its profiler's start-up costs seconds per child)
    build_unrunnable: bool = False  # also compile solutions this run cannot run (the GPU-less gate's CUDA ones)
    tolerance: str = "problem"  # problem | kernelbench | kernelbench-v0.1: atol/rtol's source (TOLERANCE_PROFILES)
    precision: str | None = None  # fp32 | fp16 | bf16; None takes each problem's own (fp32 unless problem.toml says)
    backward: bool | None = None  # forward+backward as one call; None takes each problem's own (problem.toml)

    def precision_for(self, problem: ProblemSettings) -> str:
        """The precision `problem` is evaluated in: --precision, else the problem's own (problem.toml, fp32)."""
        return self.precision or problem.precision

    def backward_for(self, problem: ProblemSettings) -> bool:
        """Whether `problem`'s calls are judged forward and backward: --backward/--forward-only, else problem.toml."""
        return self.backward if self.backward is not None else problem.backward

    def tolerance_for(self, problem: ProblemSettings) -> tuple[float, float]:
        """(atol, rtol) for `problem`'s comparisons in this run (see `tolerance`)."""
        return tolerance(self.tolerance, self.precision_for(problem), (problem.atol, problem.rtol),
                         (self.atol, self.rtol))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:  # a parsed document (run.json's config)
        """The configuration as run.json stores it (dataclasses.asdict), e.g. to resume a run."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["math"] = MathFlags(**data.get("math", {}))
        values["timing"] = TimingPolicy(**data.get("timing", {}))
        values["results_dir"] = Path(data.get("results_dir", "results"))
        values["cache_dir"] = Path(data["cache_dir"]) if data.get("cache_dir") else None
        return cls(**values)
