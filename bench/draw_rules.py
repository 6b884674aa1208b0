"""Which of a row's memory draws its headline keeps: the judge's rule against another, re-derived from stored samples.

    python bench/draw_rules.py RUN.json [RUN.json ...] [--solution honest] [--rows]

For every row that drew its memory (diagnostics.protocol.placements) each side's samples are put back into their groups
(the kept ones are in `timing.samples`, the left-out ones in the placement figures; a group is whole either way, and a
rule reads only the groups' speeds, each its fastest sample (placement.draw_speed), and spreads, not their order) and the speedup is derived again under:

- `step`: the judge's rule (kbench.judge.timing.placement.fastest_groups): the groups in order from the fastest, up to
  the first step larger than the tolerance (a second speed);
- `band`: every group within the tolerance of the fastest group, however gradually the others rise.

It prints, per rule, the speedups' range, median and how many lie off 1.00 by more than 1% and 2% (meant for honest
copies, whose speedup should be 1), then with `--rows` every row where a rule moves the speedup by more than 0.2%. The
`step` rule reproduces the stored speedup (a check of the re-derivation; within 0.1%, the unfinished last group being
left off). Needs no GPU.

On the two level-2 runs of 2026-11-28 (two H200s; 179 drawn rows) both rules gave the same speedups; a third run's #77
read 1.028 with its eager's ten groups spread 4.1% in steps below the tolerance, the case the band rule is about.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbench.judge.timing import placement
from kbench.results.stats import median

Rule = Callable[[Sequence[float]], Sequence[int]]


def band(samples: Sequence[float], rounds: int = placement.GROUP_ROUNDS,
         tolerance: float = placement.SLOW_GROUP) -> tuple[int, ...]:
    """The indices of `samples` in groups whose speed (placement.draw_speed) is within the step (placement.draw_groups,
    as the judge's rule sets it) of the fastest complete group's."""
    groups, step = placement.draw_groups(samples, rounds, tolerance)
    complete = [placement.draw_speed([samples[i] for i in g]) for g in groups if len(g) == rounds]
    if not complete:
        return tuple(range(len(samples)))
    limit = min(complete) * (1.0 + step)
    return tuple(i for g in groups if placement.draw_speed([samples[i] for i in g]) <= limit for i in g)


RULES: dict[str, Rule] = {"step": placement.fastest_groups, "band": band}


def regrouped(kept: Sequence[float], dropped: Sequence[float], rounds: int) -> list[float]:
    """A side's samples as whole groups again: the kept groups, then the left-out ones (a last unfinished group, if
    any, is left off: no rule keeps it by its own speed)."""
    whole = [list(kept[i:i + rounds]) for i in range(0, len(kept), rounds)]
    whole += [list(dropped[i:i + rounds]) for i in range(0, len(dropped), rounds)]
    return [s for g in whole if len(g) == rounds for s in g]


def rows(paths: Sequence[Path], solution: str | None) -> list[dict]:
    found = []
    for path in paths:
        for row in json.loads(path.read_text())["evaluations"]:
            drawn = ((row.get("diagnostics") or {}).get("protocol") or {}).get("placements")
            if not drawn or not row.get("timing") or not row.get("eager_timing"):
                continue
            if solution is not None and row["solution"] != solution:
                continue
            rounds = drawn["rounds"]
            mine = regrouped(row["timing"]["samples"], drawn["solution_dropped"], rounds)
            theirs = regrouped(row["eager_timing"]["samples"], drawn["eager_dropped"], rounds)
            if not mine or not theirs:
                continue
            derived = {name: median([theirs[i] for i in rule(theirs)]) / median([mine[i] for i in rule(mine)])
                       for name, rule in RULES.items()}
            found.append({"run": path.parent.name, "row": f"{row['problem']}/{row['solution']}",
                          "stored": row.get("speedup_vs_eager"), **derived})
    return found


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run.json files")
    parser.add_argument("--solution", default=None, help="only rows of this solution (e.g. honest)")
    parser.add_argument("--rows", action="store_true", help="every row a rule moves by more than 0.2%%")
    args = parser.parse_args(argv)
    found = rows(args.runs, args.solution)
    if not found:
        print("no row drew its memory in these runs")
        return
    print(f"{len(found)} rows that drew their memory")
    print("| rule | min | median | max | off 1 by >1% | by >2% |")
    print("|---|---|---|---|---|---|")
    for name in ("stored", *RULES):
        values = sorted(r[name] for r in found if r[name] is not None)
        print(f"| {name} | {values[0]:.4f} | {median(values):.4f} | {values[-1]:.4f} | "
              f"{sum(abs(v - 1) > 0.01 for v in values)} | {sum(abs(v - 1) > 0.02 for v in values)} |")
    if args.rows:
        for r in found:
            if abs(r["band"] / r["step"] - 1) > 0.002:
                print(f"{r['run']} {r['row']}: stored {r['stored']}, step {r['step']:.4f}, band {r['band']:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
