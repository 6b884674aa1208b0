"""`kbench list`: problems with origin, sizes and tolerance, and their solutions with devices."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from kbench.discovery import list_problems, list_solutions


def _sizes(constants: dict[str, object], small: dict[str, object]) -> str:
    """Each size constant as full->small, e.g. `batch_size 128->2`."""
    return ", ".join(f"{k} {v}->{small[k]}" for k, v in constants.items() if k in small)


def listing(problems_dir: Path, solutions_dir: Path) -> str:
    rows = []
    for p in list_problems(problems_dir):
        solutions = list_solutions(p.name, solutions_dir)
        rows.append([
            p.name,
            p.origin,
            f"atol={p.atol:g} rtol={p.rtol:g}",
            _sizes(dict(p.constants), dict(p.small)),
            "\n".join(f"{s.name} ({', '.join(s.devices)})" for s in solutions) or "-",
        ])
    return tabulate(rows, headers=["problem", "origin", "tolerance", "sizes", "solutions"], tablefmt="simple")
