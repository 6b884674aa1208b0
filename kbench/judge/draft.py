"""A row while its child makes it (a solution's judge, or the reference's child for the eager row): each step adds
to it, the verdict closes it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kbench.judge.verdict import Decision
from kbench.results.findings import Finding
from kbench.results.records import Evaluation


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

