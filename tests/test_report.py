"""The leaderboard: golden markdown, fast_p and geometric mean by hand, the chart file."""

import pytest

from kbench.reports.leaderboard import fast_p, markdown, ranked, summarize, write_report
from kbench.results.records import COMPILED, EAGER, Evaluation, Measurement, Status, TrialResult
from kbench.results.storage import RunStore


def ev(problem, solution, ms=None, vs_eager=None, vs_compile=None, status=Status.CORRECT, err=None):
    trials = (TrialResult(seed=1, passed=True, max_abs_err=err),) if err is not None else ()
    return Evaluation(problem=problem, solution=solution, status=status, device="cuda", size="full",
                      timing=Measurement((ms / 1e3,)) if ms else None, trials=trials,
                      speedup_vs_eager=vs_eager, speedup_vs_compile=vs_compile)


RECORDS = [
    ev("a", EAGER, 4.0, 1.0),
    ev("a", COMPILED, 2.0, 2.0, 1.0),
    ev("a", "fast", 1.0, 4.0, 2.0, err=1e-6),
    ev("a", "slow", 3.0, 4 / 3, 2 / 3, err=2e-6),
    ev("b", EAGER, 1.0, 1.0),
    ev("b", "meh", 0.8, 1.25, 0.5, err=0.0),
    ev("c", EAGER, 1.0, 1.0),
    ev("c", "broken", status=Status.INCORRECT),
]


def test_fast_p_by_hand():
    # a: best 4x eager / 2x compile; b: 1.25x / 0.5x; c: no correct solution.
    assert fast_p(RECORDS, 0) == pytest.approx(2 / 3)
    assert fast_p(RECORDS, 1) == pytest.approx(2 / 3)
    assert fast_p(RECORDS, 1.5) == pytest.approx(1 / 3)
    assert fast_p(RECORDS, 2) == pytest.approx(1 / 3)
    assert fast_p(RECORDS, 1, "speedup_vs_compile") == pytest.approx(1 / 3)
    assert fast_p(RECORDS, 2, "speedup_vs_compile") == 0.0  # 2.0 is not more than 2


def test_geometric_mean_of_the_best_per_problem():
    s = summarize(RECORDS)
    assert s.problems == 3
    assert s.geomean_eager == pytest.approx((4.0 * 1.25) ** 0.5)
    assert s.geomean_compile == pytest.approx((2.0 * 0.5) ** 0.5)


def test_ranking_puts_correct_solutions_by_time_first():
    assert [e.solution for e in ranked(RECORDS, "a")] == ["fast", COMPILED, "slow", EAGER]
    assert [e.solution for e in ranked(RECORDS, "c")] == [EAGER, "broken"]


GOLDEN = """# kbench report: run R1

GPU X, torch 2.11, started 2026-11-22T00:00:00+00:00, state complete.

## Suite

| baseline         | fast_0   | fast_1   | fast_1.5   | fast_2   | geomean (best per problem)   |
|------------------|----------|----------|------------|----------|------------------------------|
| vs eager         | 67%      | 67%      | 33%        | 33%      | 2.24x                        |
| vs torch.compile | 67%      | 33%      | 33%        | 0%       | 1.00x                        |

fast_p: share of the 3 problem(s) with a correct solution more than p times faster than the baseline (fast_0: any correct solution).

## a

| rank   | solution      | status   | median ms   | vs eager   | vs compile   | max abs err   | note   |
|--------|---------------|----------|-------------|------------|--------------|---------------|--------|
| 1      | fast          | correct  | 1.000       | 4.00x      | 2.00x        | 1.0e-06       |        |
| 2      | torch.compile | correct  | 2.000       | 2.00x      | 1.00x        |               |        |
| 3      | slow          | correct  | 3.000       | 1.33x      | 0.67x        | 2.0e-06       |        |
| 4      | eager         | correct  | 4.000       | 1.00x      |              |               |        |

## b

| rank   | solution   | status   | median ms   | vs eager   | vs compile   | max abs err   | note   |
|--------|------------|----------|-------------|------------|--------------|---------------|--------|
| 1      | meh        | correct  | 0.800       | 1.25x      | 0.50x        | 0.0e+00       |        |
| 2      | eager      | correct  | 1.000       | 1.00x      |              |               |        |

## c

| rank   | solution   | status    | median ms   | vs eager   | vs compile   | max abs err   | note   |
|--------|------------|-----------|-------------|------------|--------------|---------------|--------|
| 1      | eager      | correct   | 1.000       | 1.00x      |              |               |        |
| 2      | broken     | incorrect |             |            |              |               |        |
"""


def test_golden_markdown():
    doc = {"run_id": "R1", "environment": {"gpu": {"name": "GPU X"}, "torch": "2.11"},
           "started": "2026-11-22T00:00:00+00:00", "state": "complete"}
    assert markdown(doc, RECORDS) == GOLDEN


def test_report_writes_markdown_and_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    store = RunStore.create(tmp_path, {"environment": {"gpu": {"name": "G"}, "torch": "t"}})
    for e in RECORDS:
        store.add(e)
    store.finish()
    md, png, text = write_report(None, tmp_path)
    assert md.read_text() == text and "## a" in text
    assert png is not None and png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_counts_stay_integers_in_the_csv_when_some_rows_have_none():
    from kbench.reports.tables import results_frame
    from kbench.results.records import Evaluation, Measurement, Status

    rows = [Evaluation(problem="p", solution="a", status=Status.CORRECT, device="cpu", size="small",
                       timing=Measurement((0.001,) * 644)),
            Evaluation(problem="p", solution="b", status=Status.NOT_RUN, device="cpu", size="small")]
    csv = results_frame(rows).to_csv(index=False).splitlines()
    n = csv[0].split(",").index("n")
    assert csv[1].split(",")[n] == "644" and csv[2].split(",")[n] == ""
