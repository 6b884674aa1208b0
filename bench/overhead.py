"""Where evaluations spend their time: per-phase seconds of the solution rows of one or more run files.

    python bench/overhead.py results/<run>/run.json [results/baselines/h100.json ...]

For each run: the median, over its solution rows that ran (correct, suspect or incorrect), of the wall seconds of
each evaluation and of each phase the judge recorded (`phases`), the evaluation overhead (everything but
the timing phase), and the timing protocol's own figures (`diagnostics.protocol`: rounds, outputs rechecked, seconds
spent refreshing inputs and rechecking, the calibrated round-trip cost). Several runs print side by side.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PHASES = ("calibration", "load", "trials", "other_sizes", "timing", "trust_determinism", "trust_fp64", "trust_profile")
PROTOCOL = ("rounds", "rechecked", "refresh_s", "recheck_s", "calibration_p50_s")
REFERENCE_ROWS = ("eager", "torch.compile")


def _run_file(path: Path) -> dict:
    """A run.json as the current version has it (older files migrated: kbench.results.migrate)."""
    from kbench.results import migrate, storage

    return migrate.upgrade(json.loads(path.read_text()), storage.VERSION)


def solution_rows(path: Path) -> list[dict]:
    doc = _run_file(path)
    return [e for e in doc["evaluations"] if e["solution"] not in REFERENCE_ROWS
            and e["status"] in ("correct", "suspect", "incorrect")]


def medians(rows: list[dict]) -> dict[str, float]:
    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    out = {"evaluations": float(len(rows)), "seconds": med([r["seconds"] for r in rows])}
    for phase in PHASES:
        out[phase] = med([(r.get("phases") or {}).get(phase, 0.0) for r in rows])
    out["overhead (all but timing)"] = med([r["seconds"] - (r.get("phases") or {}).get("timing", 0.0)
                                            for r in rows])
    for key in PROTOCOL:
        protocols = [(r.get("diagnostics") or {}).get("protocol") or {} for r in rows]
        values = [p[key] for p in protocols if p.get(key) is not None]
        out[f"protocol.{key}"] = med(values)
    return out


def main(paths: list[str]) -> None:
    if not paths:
        raise SystemExit(__doc__)
    columns = [medians(solution_rows(Path(p))) for p in paths]
    print("median per evaluation".ljust(28) + "".join(Path(p).parent.name[-24:].rjust(26) for p in paths))
    for key in columns[0]:
        print(key.ljust(28) + "".join(f"{c[key]:26.3f}" for c in columns))


if __name__ == "__main__":
    main(sys.argv[1:])
