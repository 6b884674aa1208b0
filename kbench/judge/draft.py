"""The result of an evaluation (or of the reference's child) while it is made: each step adds to it, the verdict
closes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbench.judge.verdict import Decision
from kbench.results.diagnostics import Diagnostics
from kbench.results.figures import Accuracy, Floor, KernelShare, PeakMemory
from kbench.results.findings import Finding
from kbench.results.records import Measurement, Status, TrialResult
from kbench.wire.jobs import CompiledResult, EvaluateResult, ReferenceResult


@dataclass
class Draft:
    """What the judge has found so far (mutable: one per evaluation, filled in step by step)."""

    phases: dict[str, float] = field(default_factory=dict)  # seconds per step (kbench.judge.harness.Phases)
    warnings: list[Finding] = field(default_factory=list)
    # the protocol's rounds, the machine, the sandbox, weights copied
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    trials: list[TrialResult] = field(default_factory=list)
    size_checks: dict[str, tuple[TrialResult, ...]] = field(default_factory=dict)
    timing: Measurement | None = None
    eager_timing: Measurement | None = None
    accuracy: Accuracy | None = None
    kernels: KernelShare | None = None
    peak: PeakMemory | None = None
    percent_of_floor: float | None = None

    def result(self, decision: Decision) -> EvaluateResult:
        """The verdict (kbench.judge.verdict.decide) with everything found, as the record the parent reads."""
        return EvaluateResult(status=decision.status, message=decision.message, trials=tuple(self.trials),
                              size_checks=self.size_checks, timing=self.timing, eager_timing=self.eager_timing,
                              speedup_vs_eager=decision.speedups.speedup_vs_eager,
                              speedup_vs_compile=decision.speedups.speedup_vs_compile, withheld=decision.withheld,
                              percent_of_floor=self.percent_of_floor, warnings=tuple(self.warnings),
                              accuracy=self.accuracy, kernels=self.kernels, peak=self.peak, phases=self.phases,
                              diagnostics=self.diagnostics)


@dataclass
class ReferenceDraft:
    """What the reference's child has found so far (mutable, filled in step by step)."""

    phases: dict[str, float] = field(default_factory=dict)
    warnings: list[Finding] = field(default_factory=list)
    # what it returns, its noise, the machine, priming, regimes
    diagnostics: Diagnostics = field(default_factory=Diagnostics)

    def result(self, timing: Measurement, peak: PeakMemory, floor: Floor | None = None,
               compiled: CompiledResult | None = None, percent_of_floor: float | None = None) -> ReferenceResult:
        """The reference's row: correct, with its time and figures."""
        return ReferenceResult(status=Status.CORRECT, warnings=tuple(self.warnings), timing=timing, compiled=compiled,
                               floor=floor, percent_of_floor=percent_of_floor, peak=peak, phases=self.phases,
                               diagnostics=self.diagnostics)
