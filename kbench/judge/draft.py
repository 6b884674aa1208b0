"""The result of an evaluation (or of the reference's child) while it is made: each step adds to it, the verdict
closes it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kbench.judge.verdict import Decision
from kbench.results.diagnostics import Diagnostics
from kbench.results.figures import Floor, PeakMemory
from kbench.results.findings import Finding
from kbench.results.records import Evaluation, Measurement, Status
from kbench.wire.jobs import CompiledResult, ReferenceResult


@dataclass
class Draft:
    """What the judge has found so far: the row itself (kbench.results.records.Evaluation), each step setting what it
    measured (`draft.row = dataclasses.replace(draft.row, accuracy=...)`), with the warnings and the seconds per step
    gathered beside it; the verdict closes it (mutable: one per evaluation)."""

    row: Evaluation = field(default_factory=Evaluation)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step (kbench.judge.harness.Phases)
    warnings: list[Finding] = field(default_factory=list)

    def result(self, decision: Decision) -> Evaluation:
        """The row with its verdict (kbench.judge.verdict.decide) and everything found: the record the parent reads
        and completes with what was evaluated and where."""
        return dataclasses.replace(self.row, status=decision.status, message=decision.message,
                                   speedup_vs_eager=decision.speedups.speedup_vs_eager,
                                   speedup_vs_compile=decision.speedups.speedup_vs_compile, withheld=decision.withheld,
                                   warnings=tuple(self.warnings), phases=dict(self.phases))


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
