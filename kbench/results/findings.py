"""Findings: what a check found about a row, as a code and a message, from the check that made it to the report.

A finding is typed end to end (the judge's result, the run file, the reports): code that decides on findings reads
the code, never the message. Run files before version 3 kept each as one string, "[code] message"; reading them
(kbench.results.migrate) is the one place that splits such a string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class FindingCode(str, Enum):
    """Every finding kbench makes. `SUSPECT` ones mean the row's timing cannot be trusted; `MACHINE` ones are about the
    machine while the row was timed, not about the solution."""

    # the timing cannot be trusted (a row that passes with one is `suspect`)
    ESCAPED_TIMER = "escaped_timer"
    TIMER_MISMATCH = "timer_mismatch"
    BELOW_FLOOR = "below_floor"
    STATE_CHANGED = "state_changed"
    CLOCK_PATCHED = "clock_patched"
    REFERENCE_DISTURBED = "reference_disturbed"
    ESCAPED_PROCESS = "escaped_process"
    REGIME_CHANGED = "regime_changed"
    UNFINISHED_WORK = "unfinished_work"
    PROCESSES_DISAGREE = "processes_disagree"
    PROCESSES_UNCHECKED = "processes_unchecked"
    # the machine while the row was timed
    MACHINE_BUSY = "machine_busy"
    LEVEL_MOVED = "level_moved"
    GPU_BUSY = "gpu_busy"
    GPU_THROTTLED = "gpu_throttled"
    # the timing's own figures
    FEW_SAMPLES = "few_samples"
    LAUNCH_BOUND = "launch_bound"
    IMPLAUSIBLE_SPEED = "implausible_speed"
    # the outputs and the inputs
    NON_DETERMINISTIC = "non_deterministic"
    MODIFIES_INPUTS = "modifies_inputs"
    LOW_ACCURACY = "low_accuracy"
    TOLERANCE_BELOW_NOISE = "tolerance_below_noise"
    DEGENERATE_ZEROS = "degenerate_zeros"
    DEGENERATE_CONSTANT = "degenerate_constant"
    DEGENERATE_INPUTS = "degenerate_inputs"
    MEMORY = "memory"
    CHECK_SKIPPED = "check_skipped"
    # the solution's source (kbench.judge.checks.static_checks) and what it changed in its process
    NO_CUSTOM_KERNEL = "no_custom_kernel"
    KERNEL_NEVER_CALLED = "kernel_never_called"
    TRY_EXCEPT_FALLBACK = "try_except_fallback"
    THREADS = "threads"
    NEW_STREAM = "new_stream"
    PRECISION_DOWNCAST = "precision_downcast"
    HARNESS_ACCESS = "harness_access"
    MONKEY_PATCH = "monkey_patch"
    CACHING = "caching"
    # a finding of an older run file whose code this version does not know (its text is kept whole)
    OTHER = "other"

    def __str__(self) -> str:
        return self.value

    @property
    def suspect(self) -> bool:
        return self in SUSPECT


SUSPECT = frozenset({FindingCode.ESCAPED_TIMER, FindingCode.TIMER_MISMATCH, FindingCode.BELOW_FLOOR,
                     FindingCode.STATE_CHANGED, FindingCode.CLOCK_PATCHED, FindingCode.REFERENCE_DISTURBED,
                     FindingCode.ESCAPED_PROCESS, FindingCode.REGIME_CHANGED, FindingCode.UNFINISHED_WORK,
                     FindingCode.PROCESSES_DISAGREE, FindingCode.PROCESSES_UNCHECKED})
MACHINE = frozenset({FindingCode.MACHINE_BUSY, FindingCode.LEVEL_MOVED, FindingCode.GPU_BUSY,
                     FindingCode.GPU_THROTTLED})


@dataclass(frozen=True)
class Finding:
    """One finding: its code and what it says (a sentence, with its figures and, where it helps, what to do)."""

    code: FindingCode
    message: str

    @property
    def text(self) -> str:
        """As a table's note or a report's line shows it: "[code] message"."""
        return f"[{self.code.value}] {self.message}"

    def __str__(self) -> str:
        return self.text


_LEGACY = re.compile(r"\[([a-z_0-9]+)\] ?(.*)", re.DOTALL)


def from_legacy(text: str) -> Finding:
    """A finding as run files before version 3 kept it ("[code] message"); an unknown code keeps its text whole."""
    found = _LEGACY.fullmatch(text)
    if found is not None:
        try:
            return Finding(FindingCode(found.group(1)), found.group(2))
        except ValueError:
            pass
    return Finding(FindingCode.OTHER, text)
