"""A row's speedup as a reader should see it: the ratio, what was divided by what, and whether it is a win at all.

A speedup is the eager median over the solution's median, both from the same judge's rounds. Its interval comes from
the distribution-free 95% intervals of the two medians (order statistics, kbench.results.stats.median_ci): the
ratio's lower end is the eager interval's low over the solution's high, its upper end the reverse, which holds the
ratio at least as often as the two intervals hold their medians together. Statistics alone are not enough: the two
sides of a row are timed in two processes, and honest copies of the reference measured 0.967-1.020x on the H100
(34 KernelBench problems, docs/benchmarks.md), some of them significantly off 1 by a percent or two. So a speedup
counts as a win or a loss only when its whole interval lies outside the band 1 ± NOISE_BAND; fast_p counts no other,
which reads "≈1×" when its interval holds 1 and "~" with its ratio when it does not ("~0.97x (0.96-0.98)").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kbench.results.records import COMPILED, EAGER, Evaluation, Measurement, Status
from kbench.results.stats import median_ci

MIN_SAMPLES = 3  # fewer samples give no interval: such a speedup is never called significant
NOISE_BAND = 0.03  # honest copies of the reference: 0.967-1.020x on the H100 (34 problems, timing v3)


@dataclass(frozen=True)
class Speedup:
    """base_s / solution_s, with the interval [low, high] of that ratio."""

    base_s: float  # the baseline's median (the eager calls interleaved with the solution's, or torch.compile's)
    solution_s: float  # the solution's median, which it was divided by
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.base_s / self.solution_s

    @property
    def significant(self) -> bool:
        """The interval lies wholly above or wholly below the noise band 1 ± NOISE_BAND."""
        return self.low > 1.0 + NOISE_BAND or self.high < 1.0 - NOISE_BAND

    @property
    def win(self) -> bool:
        return self.low > 1.0 + NOISE_BAND

    @property
    def tone(self) -> str:
        """How a report shows it: "win" above the noise band, "slower" wholly below it, "" within noise."""
        return "win" if self.win else "slower" if self.high < 1.0 - NOISE_BAND else ""

    def beats(self, p: float) -> bool:
        """Significantly more than p times faster (fast_p's test): the interval's lower end above p, and for p >= 1
        above the noise band too (a win); for p < 1 (fast_0.5, fast_0.8: not slower than p) above p alone."""
        return self.low > (max(p, 1.0 + NOISE_BAND) if p >= 1.0 else p)

    def label(self) -> str:
        """"8.00x" for a significant win, "0.77x slower" for a significant slowdown (in plain text, where no colour
        tells the two apart); for one whose interval reaches the noise band, "≈1x (0.99-1.02)" when the interval holds
        1, else "~" and the ratio with its interval ("~0.97x (0.96-0.98)": within noise, but not 1): a slowdown wholly
        below 1 never reads as "≈1x". Off 1 by an interval too narrow for two decimals, the ratio gets three and no
        interval ("~0.998x", where "~1.00x (1.00-1.00)" said nothing)."""
        if self.significant:
            return f"{self.value:.2f}x" + (" slower" if self.tone == "slower" else "")
        if self.low <= 1.0 <= self.high:
            return f"≈1x ({self.low:.2f}-{self.high:.2f})"
        if f"{self.low:.2f}" == f"{self.high:.2f}":
            return f"~{self.value:.3f}x"
        return f"~{self.value:.2f}x ({self.low:.2f}-{self.high:.2f})"

    def divided(self) -> str:
        """What was divided by what, in ms: "2.884 / 0.361 ms"."""
        return f"{self.base_s * 1e3:.3f} / {self.solution_s * 1e3:.3f} ms"


def speedup(eager: Measurement | None, solution: Measurement | None) -> Speedup | None:
    """The speedup of `solution` over `eager` (None without samples on either side)."""
    if eager is None or solution is None or not eager.samples or not solution.samples or solution.median <= 0:
        return None
    if len(eager.samples) < MIN_SAMPLES or len(solution.samples) < MIN_SAMPLES:
        return Speedup(eager.median, solution.median, 0.0, float("inf"))
    e_low, e_high = median_ci(eager.samples)
    s_low, s_high = median_ci(solution.samples)
    return Speedup(eager.median, solution.median, e_low / s_high, e_high / max(s_low, 1e-30))


def over_compile(row: Speedup, eager: Measurement | None, compiled: Measurement | None) -> Speedup | None:
    """A solution's speedup over torch.compile, brought in through the reference process's eager/compiled ratio (as
    `vs_compile` is): base = compiled median x (the eager beside the solution / the reference process's eager)."""
    ratio = speedup(compiled, eager)  # compiled / eager in the reference's process, with its interval
    if ratio is None:
        return None
    base = row.base_s * ratio.value
    return Speedup(base, row.solution_s, row.low * ratio.low, row.high * ratio.high)


def of_row(row: Evaluation) -> Speedup | None:
    """A correct solution row's speedup over the eager calls timed beside it (None for other rows)."""
    if row.status != Status.CORRECT:
        return None
    return speedup(row.eager_timing, row.timing)


def significant_fast_p(rows: Sequence[Evaluation], problems: Sequence[str], p: float) -> float:
    """Share of `problems` with a correct solution significantly more than p times faster than eager (p = 0: any
    correct solution, as KernelBench's fast_0)."""
    if not problems:
        return 0.0
    wins = 0
    for problem in problems:
        mine = [r for r in rows if r.problem == problem and r.status == Status.CORRECT
                and r.solution not in (EAGER, COMPILED)]
        if p == 0:
            wins += bool(mine)
            continue
        wins += any((s := of_row(r)) is not None and s.beats(p) for r in mine)
    return wins / len(problems)
