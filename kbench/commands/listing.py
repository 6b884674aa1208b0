"""`kbench list`: problems with origin, sizes and tolerance, and their solutions with devices (and precisions)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from kbench.commands.build_and_check import ProblemCheck
from kbench.problems.discovery import list_problems, list_solutions
from kbench.results.records import SolutionSpec
from kbench.results.tolerances import PRECISIONS


def _sizes(constants: dict[str, object], small: dict[str, object]) -> str:
    """Each size constant as full->small, e.g. `batch_size 128->2` (one per line)."""
    return "\n".join(f"{k} {v}->{small[k]}" for k, v in constants.items() if k in small)


def _solution(s: SolutionSpec) -> str:
    """`name (devices)`, and the precisions when it declares fewer than all: `cuda_fused (cuda; fp32)`."""
    precisions = "" if set(s.precisions) == set(PRECISIONS) else f"; {', '.join(s.precisions)}"
    return f"{s.name} ({', '.join(s.devices)}{precisions})"


def listing(problems_dir: Path, solutions_dir: Path) -> str:
    rows = []
    for p in list_problems(problems_dir):
        solutions = list_solutions(p.name, solutions_dir)
        rows.append([
            p.name,
            p.origin,
            f"atol={p.atol:g} rtol={p.rtol:g}" + (f" {p.precision}" if p.precision != "fp32" else ""),
            _sizes(dict(p.constants), dict(p.small)),
            "\n".join(_solution(s) for s in solutions) or "-",
        ])
    # Long cells wrap, so a line stays within about 120 columns.
    return tabulate(rows, headers=["problem", "origin", "tolerance", "sizes (full->small)", "solutions"],
                    tablefmt="simple", maxcolwidths=[24, 28, 12, 26, 28])


def _share(value: float) -> str:
    """A share as a percentage that never rounds a miss up to 100% (one element that fails makes a constant fail)."""
    return "100%" if value >= 1 else (">99.9%" if value > 0.999 else f"{value:.1%}")


def check_table(checks: Sequence[ProblemCheck]) -> str:
    rows = []
    for c in checks:
        fig = c.figures
        verdict = c.error or ("; ".join(f.split("] ", 1)[-1] for f in c.findings) if c.findings else "clean")
        noise = fig.get("noise") or {}
        atol, rtol = noise.get("atol", c.problem.atol), noise.get("rtol", c.problem.rtol)
        rows.append([c.problem.name, c.size, c.precision, f"atol={atol:g} rtol={rtol:g}",
                     f"{noise['max_abs']:.2g}" if "max_abs" in noise else "",
                     _share(fig["constant_pass_share"]) if "constant_pass_share" in fig else "",
                     f"{fig['zero_share']:.1%}" if "zero_share" in fig else "",
                     f"{fig['output_std']:.3g}" if "output_std" in fig else "", verdict])
    return tabulate(rows, headers=["problem", "size", "precision", "tolerance", "ref err vs fp64", "constant passes",
                                   "zeros", "output std", "verdict"], tablefmt="simple", maxcolwidths=[24, None, None, 12, None, None, None, None, 60])
