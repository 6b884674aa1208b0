"""`kbench list`: problems with origin, sizes and tolerance, and their solutions with devices (and precisions)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from kbench.commands.build_and_check import ProblemCheck
from kbench.config.tolerances import PRECISIONS
from kbench.problems.discovery import list_problems, list_solutions
from kbench.reports.tables import WIDTH, grid
from kbench.results.records import SolutionSpec

HEADERS = ("problem", "origin", "tolerance", "sizes (full->small)", "solutions")
# The columns that may wrap, in the order they give up width, and the narrowest each may get (tolerance: its longest
# word). Names never wrap: where the table cannot fit without that, each problem gets a block of its own.
SHRINK = ((2, 0), (1, 20))
NBSP = "\xa0"  # a space textwrap never breaks at: `batch_size 128->2` stays on one line
Record = tuple[str, str, str, list[str], list[str]]


def _sizes(constants: dict[str, object], small: dict[str, object]) -> list[str]:
    """Each size constant as full->small, e.g. `batch_size 128->2`."""
    return [f"{k} {v}->{small[k]}" for k, v in constants.items() if k in small]


def _solution(s: SolutionSpec) -> str:
    """`name (devices)`, and the precisions when it declares fewer than all: `cuda_fused (cuda; fp32)`."""
    precisions = "" if set(s.precisions) == set(PRECISIONS) else f"; {', '.join(s.precisions)}"
    return f"{s.name} ({', '.join(s.devices)}{precisions})"


def _records(problems_dir: Path, solutions_dir: Path) -> list[Record]:
    records = []
    for p in list_problems(problems_dir):
        tolerance = f"atol={p.atol:g} rtol={p.rtol:g}" + (f" {p.precision}" if p.precision != "fp32" else "")
        solutions = [_solution(s) for s in list_solutions(p.name, solutions_dir)] or ["-"]
        records.append((p.name, p.origin, tolerance, _sizes(dict(p.constants), dict(p.small)), solutions))
    return records


def _wrap(text: str, width: int, split_words: bool = True) -> str:
    """Text wrapped at spaces to `width`; a word wider than that is cut only with `split_words`."""
    return "\n".join(textwrap.wrap(text, width, break_long_words=split_words, break_on_hyphens=False))


def _widths(records: Sequence[Record], width: int) -> list[int] | None:
    """Each column's width so that the table fits `width`, or None when it cannot without splitting a name."""
    cells = [[[r[0]], [r[1]], [r[2]], r[3], r[4]] for r in records]
    natural = [max([len(HEADERS[i])] + [len(line) for c in cells for line in c[i]]) for i in range(5)]
    floors = {2: max([len(HEADERS[2])] + [len(w) for r in records for w in r[2].split()])}
    widths = list(natural)
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    for column, floor in SHRINK:
        cut = max(0, min(excess, widths[column] - max(floor, floors.get(column, 0))))
        widths[column] -= cut
        excess -= cut
    return widths if excess <= 0 else None


def _blocks(records: Sequence[Record], width: int) -> str:
    """One problem per block, for a terminal too narrow for the table: its name alone on the first line."""
    out = []
    for name, origin, tolerance, sizes, solutions in records:
        lines, pairs = [name], ", ".join(s.replace(" ", NBSP) for s in sizes)
        for label, text in (("origin", origin), ("tolerance", tolerance), ("sizes", pairs)):
            lines += [line.replace(NBSP, " ") for line in textwrap.wrap(
                text, max(width, 24), initial_indent=f"  {label:<11}", subsequent_indent=" " * 13,
                break_long_words=False, break_on_hyphens=False)]
        lines += [f"  {'solutions' if i == 0 else '':<11}{s}" for i, s in enumerate(solutions)]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def listing(problems_dir: Path, solutions_dir: Path, width: int = WIDTH) -> str:
    """The problems as a table that fits `width` columns, or one block per problem where it cannot; no problem or
    solution name is ever split over two lines."""
    records = _records(problems_dir, solutions_dir)
    widths = _widths(records, width)
    if widths is None:
        return _blocks(records, width)
    rows = [[name, _wrap(origin, widths[1]), _wrap(tolerance, widths[2], False), "\n".join(sizes), "\n".join(solutions)]
            for name, origin, tolerance, sizes, solutions in records]
    return grid(HEADERS, rows)


def _share(value: float) -> str:
    """A share as a percentage that never rounds a miss up to 100% (one element that fails makes a constant fail)."""
    return "100%" if value >= 1 else (">99.9%" if value > 0.999 else f"{value:.1%}")


def check_table(checks: Sequence[ProblemCheck]) -> str:
    rows = []
    for c in checks:
        verdict = c.error or ("; ".join(f.message for f in c.findings) if c.findings else "clean")
        noise, found = c.noise, c.output.degeneracy if c.output is not None else None
        atol, rtol = (noise.atol, noise.rtol) if noise is not None else (c.problem.atol, c.problem.rtol)
        rows.append([c.problem.name, c.size, c.precision, f"atol={atol:g} rtol={rtol:g}",
                     f"{noise.max_abs:.2g}" if noise is not None else "",
                     _share(found.constant_pass_share) if found is not None else "",
                     f"{found.zero_share:.1%}" if found is not None else "",
                     f"{found.output_std:.3g}" if found is not None else "", verdict])
    return tabulate(rows, headers=["problem", "size", "precision", "tolerance", "ref err vs fp64", "constant passes",
                                   "zeros", "output std", "verdict"], tablefmt="simple",
                    maxcolwidths=[None, None, None, 12, None, None, None, None, 60])
