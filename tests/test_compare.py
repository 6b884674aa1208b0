"""Compare verdicts on synthetic runs whose answers are known."""

import random

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.errors import UsageError
from kbench.reports import compare
from kbench.results.records import Evaluation, Measurement, Status
from kbench.results.stats import mann_whitney_u
from kbench.results.storage import LoadedRun, RunStore


def noisy(center, n=40, spread=0.002, seed=0):
    rng = random.Random(seed)
    return tuple(center * (1 + rng.uniform(-spread, spread)) for _ in range(n))


def ev(solution, samples=None, status=Status.CORRECT, problem="p", eager=None):
    timing = Measurement(samples) if samples else None
    beside = Measurement(eager) if eager else None
    x = sorted(eager)[len(eager) // 2] / sorted(samples)[len(samples) // 2] if eager and samples else None
    return Evaluation(problem=problem, solution=solution, status=status, device="cuda", size="full", timing=timing,
                      eager_timing=beside, speedup_vs_eager=x)


def run(label, *evaluations, gpu="NVIDIA H100 80GB HBM3", torch="2.11.0"):
    doc = {"run_id": label, "environment": {"gpu": {"name": gpu}, "torch": torch}, "config": {"math": {"cudnn_tf32": True}}}
    return LoadedRun(path=None, label=label, doc=doc, evaluations=tuple(evaluations))


def test_mann_whitney_matches_reference_values():
    # Reference p-values from scipy.stats.mannwhitneyu(method="asymptotic"), the same corrections.
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]) == (0.0, pytest.approx(0.0808556, abs=1e-6))
    assert mann_whitney_u([1, 2, 2, 3, 5], [2, 4, 6, 6, 7]) == (4.0, pytest.approx(0.0896860, abs=1e-6))
    assert mann_whitney_u([1.0] * 5, [1.0] * 5)[1] == 1.0


def test_identical_samples_are_same():
    s = noisy(1.0)
    assert compare.speed_verdict(s, s, 0.01)[0] == compare.SAME


def test_a_five_percent_shift_with_small_noise_is_detected_both_ways():
    base = noisy(1.0, seed=1)
    assert compare.speed_verdict(base, noisy(1.05, seed=2), 0.01)[0] == compare.SLOWER
    verdict, ratio, p = compare.speed_verdict(base, noisy(0.95, seed=3), 0.01)
    assert verdict == compare.FASTER and ratio == pytest.approx(0.95, abs=0.003) and p < 1e-6


def test_heavy_overlap_is_unclear_and_small_shifts_are_same():
    wide_a, wide_b = noisy(1.0, n=8, spread=0.3, seed=4), noisy(1.03, n=8, spread=0.3, seed=5)
    assert compare.speed_verdict(wide_a, wide_b, 0.01)[0] in (compare.UNCLEAR, compare.SAME)
    assert compare.speed_verdict(noisy(1.0, seed=6), noisy(1.005, seed=7), 0.01)[0] == compare.SAME


def test_status_transitions():
    before = run("a", ev("stays", noisy(1.0)), ev("breaks", noisy(1.0)), ev("fixed", status=Status.INCORRECT),
                 ev("gone", noisy(1.0)), ev("bad", status=Status.CRASHED))
    after = run("b", ev("stays", noisy(1.0, seed=9)), ev("breaks", status=Status.INCORRECT), ev("fixed", noisy(1.0)),
                ev("added", noisy(1.0)), ev("bad", status=Status.CRASHED))
    rows = {r.solution: r for r in compare.compare_runs(before, after, 0.01)}
    assert {k: r.change for k, r in rows.items()} == {
        "stays": "same", "breaks": "newly failing", "fixed": "fixed", "added": "new", "gone": "removed", "bad": "failing",
    }
    assert rows["breaks"].mark == "!" and rows["breaks"].regression and not rows["fixed"].regression


def test_a_solution_not_run_in_both_runs_is_neutral_not_failing():
    # e.g. a CPU-only solution in two CUDA runs; not run in one run only is still a status change.
    before = run("a", ev("cpu_only", status=Status.NOT_RUN), ev("dropped", noisy(1.0)))
    after = run("b", ev("cpu_only", status=Status.NOT_RUN), ev("dropped", status=Status.NOT_RUN))
    rows = {r.solution: r for r in compare.compare_runs(before, after, 0.01)}
    assert rows["cpu_only"].change == "not run" and rows["cpu_only"].mark == "" and not rows["cpu_only"].regression
    assert rows["dropped"].change == "newly failing"


def test_rows_match_on_size_too():
    before = run("a", ev("s", noisy(1.0)))
    after = run("b", Evaluation(problem="p", solution="s", status=Status.CORRECT, device="cuda", size="small",
                                timing=Measurement(noisy(1.0))))
    assert sorted(r.change for r in compare.compare_runs(before, after, 0.01)) == ["new", "removed"]


def test_different_gpus_or_torch_versions_are_refused_unless_asked():
    a = run("a", ev("s", noisy(1.0), eager=noisy(2.0, seed=1)))
    b = run("b", ev("s", noisy(1.0), eager=noisy(2.0, seed=2)), gpu="NVIDIA A100")
    with pytest.raises(UsageError, match="different machines or torch versions.*--ignore-env"):
        compare.compare_runs(a, b, 0.01)
    with pytest.raises(UsageError):
        compare.compare_runs(a, run("c", ev("s", noisy(1.0)), torch="2.12.0"), 0.01)
    assert compare.compare_runs(a, b, 0.01, ignore_env=True)[0].change == "same"
    line = compare.machines_line(a, b)
    assert line.startswith("different machines") and "NVIDIA A100" in line and "(" in line and "('" not in line
    assert not compare.machines_line(a, a).startswith("different")


def _store(results_dir, *evaluations):
    store = RunStore.create(results_dir, {"environment": {"gpu": {"name": "G"}, "torch": "t"}, "config": {"math": {}}})
    for e in evaluations:
        store.add(e)
    store.finish()
    return store


def test_cli_compares_the_latest_two_runs_and_fails_on_regression(tmp_path):
    import time

    _store(tmp_path, ev("s", noisy(1.0)))
    time.sleep(1.1)  # run ids have one-second resolution
    _store(tmp_path, ev("s", noisy(1.2, seed=3)))
    (tmp_path / "99999999-broken").mkdir()
    (tmp_path / "99999999-broken" / "run.json").write_text("{not json")
    runner = CliRunner()
    result = runner.invoke(app, ["compare", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "slower" in result.output and "skipped 99999999-broken" in result.output
    result = runner.invoke(app, ["compare", "--results-dir", str(tmp_path), "--fail-on-regression", "--format", "json"])
    assert result.exit_code == 1 and '"change":"slower"' in result.output.replace(" ", "")


def test_cli_explains_what_is_missing(tmp_path):
    result = CliRunner().invoke(app, ["compare", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and "Need two readable runs" in result.output
    result = CliRunner().invoke(app, ["compare", "nope", "--baseline", "h100", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and "No run or baseline" in result.output


# --- what the comparison says as a whole: one-run-only problems, the summary line, unfinished runs -----------------

DEAD_PID = 2**22 + 12345  # above Linux's largest pid (2**22): no process can have it


def _stored(results_dir, evaluations, problems=None, finish=True):
    """A run written to disk as kbench writes one; `problems` (names) become its header's selected problems."""
    header = {"environment": {"gpu": {"name": "G"}, "torch": "t"}, "config": {"math": {}},
              "problems": {name: {} for name in (problems or ())}}
    store = RunStore.create(results_dir, header)
    for e in evaluations:
        store.add(e)
    if finish:
        store.finish()
    return store


def _twenty_problem_pair(tmp_path):
    """Before: problems p (two solutions) and old0..old19 (two rows each); after: p (one solution dropped, one
    added) and fresh (one row)."""
    before = [ev("keep", noisy(1.0)), ev("dropped", noisy(1.0))]
    before += [ev(s, noisy(1.0), problem=f"old{i}") for i in range(20) for s in ("eager", "s")]
    after = [ev("keep", noisy(1.0, seed=5)), ev("added", noisy(1.0)), ev("eager", noisy(1.0), problem="fresh")]
    return _stored(tmp_path, before), _stored(tmp_path, after)


def test_problems_in_one_run_only_are_listed_once_not_as_rows(tmp_path):
    a, b = _twenty_problem_pair(tmp_path)
    result = compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01)
    assert sorted((r.problem, r.solution, r.change) for r in result.rows) == [
        ("p", "added", "new"), ("p", "dropped", "removed"), ("p", "keep", "same")]
    assert result.only_before.problems == tuple(f"old{i}" for i in range(20)) and result.only_before.rows == 40
    assert result.only_after == compare.OneRunOnly("after", ("fresh",), 1)
    assert result.only_before.line() == ("only in the before run: 20 problems (40 rows): old0, old1, old2, old3, "
                                         "old4, old5, old6, old7, old8, old9, ... and 10 more")
    assert result.only_after.line() == "only in the after run: 1 problem (1 row): fresh"
    assert result.summary.line == ("3 rows: 0 faster, 0 slower, 1 same, 0 unclear; status changes: 1 new, 1 removed; "
                                   "20 problems only in the before run; 1 problem only in the after run")


def test_the_cli_prints_the_summary_first_and_each_one_run_only_section_once(tmp_path):
    a, b = _twenty_problem_pair(tmp_path)
    out = CliRunner().invoke(app, ["compare", a.run_id, b.run_id, "--results-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    lines = out.output.replace("\n  ", " ").splitlines()  # the prose above the table, unwrapped
    assert lines[0].startswith(f"before {a.run_id} on ") and f"after {b.run_id} on " in lines[0]  # both machines
    assert lines[1].startswith("3 rows: 0 faster, 0 slower, 1 same") and lines[2].startswith("suite (1 problem in both")
    assert lines[4] == f"before: {a.run_id}"
    assert out.output.count("only in the before run: 20 problems (40 rows)") == 1
    assert out.output.count("only in the after run: 1 problem (1 row): fresh") == 1
    table = out.output.split(f"after:  {b.run_id}")[1].split("only in the")[0]
    assert "old" not in table and "fresh" not in table and table.count("removed") == 1  # p's dropped solution
    md = CliRunner().invoke(app, ["compare", a.run_id, b.run_id, "--format", "md", "--results-dir", str(tmp_path)])
    assert md.output.splitlines()[1].startswith("3 rows: ") and "| p " in md.output


def test_json_has_the_summary_and_the_one_run_only_problems_and_csv_only_rows(tmp_path):
    import json

    a, b = _twenty_problem_pair(tmp_path)
    out = CliRunner().invoke(app, ["compare", a.run_id, b.run_id, "--format", "json", "--results-dir", str(tmp_path)])
    doc = json.loads(out.stdout)
    assert doc["summary"].startswith("3 rows: 0 faster") and doc["counts"] == {"same": 1, "new": 1, "removed": 1}
    assert doc["only_in_before"] == {"problems": [f"old{i}" for i in range(20)], "rows": 40}
    assert doc["only_in_after"] == {"problems": ["fresh"], "rows": 1} and len(doc["rows"]) == 3
    assert (doc["before"], doc["after"], doc["warnings"]) == (a.run_id, b.run_id, [])
    csv = CliRunner().invoke(app, ["compare", a.run_id, b.run_id, "--format", "csv", "--results-dir", str(tmp_path)])
    assert csv.stdout.startswith("mark,problem,") and len(csv.stdout.split()) == 4  # the header and p's three rows
    assert "rows:" not in csv.stdout and "only in the after run: 1 problem (1 row): fresh" in csv.stderr
    assert csv.stderr.startswith(f"before {a.run_id} on ") and doc["machines"] == csv.stderr.splitlines()[0]


def test_the_summary_line_counts_every_kind_of_change(tmp_path):
    before = [ev("same", noisy(1.0)), ev("slow", noisy(1.0)), ev("fast", noisy(1.0)), ev("fast2", noisy(1.0)),
              ev("breaks", noisy(1.0)), ev("fixed", status=Status.INCORRECT), ev("bad", status=Status.CRASHED),
              ev("cpu", status=Status.NOT_RUN), ev("gone", noisy(1.0))]
    after = [ev("same", noisy(1.0, seed=9)), ev("slow", noisy(1.2, seed=3)), ev("fast", noisy(0.8, seed=4)),
             ev("fast2", noisy(0.7, seed=5)), ev("breaks", status=Status.INCORRECT), ev("fixed", noisy(1.0)),
             ev("bad", status=Status.CRASHED), ev("cpu", status=Status.NOT_RUN), ev("added", noisy(1.0))]
    a, b = _stored(tmp_path, before), _stored(tmp_path, after)
    result = compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01)
    assert result.summary.line == (
        "10 rows: 2 faster, 1 slower, 1 same, 0 unclear; status changes: 1 newly failing, 1 fixed, 1 new, 1 removed; "
        "1 failing in both runs; 1 not run in either")
    assert result.summary.rows == len(result.rows) == 10 and not result.one_run_only


def test_two_alike_runs_say_so_in_one_line(tmp_path):
    a, b = _stored(tmp_path, [ev("s", noisy(1.0))]), _stored(tmp_path, [ev("s", noisy(1.0, seed=2))])
    result = compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01)
    assert result.summary.line == "1 row: 0 faster, 0 slower, 1 same, 0 unclear; status changes: none"
    assert result.warnings == ()


def _kill_its_process(store, **process):
    """Rewrite a run file as if the process writing it had died (or, with `process`, name another one)."""
    import json

    path = store.directory / "run.json"
    doc = json.loads(path.read_text())
    doc["process"] = {**doc["process"], "pid": DEAD_PID, **process}
    path.write_text(json.dumps(doc))


def test_a_run_whose_process_died_is_incomplete_and_compare_says_how_much_never_ran(tmp_path):
    a = _stored(tmp_path, [ev("s", noisy(1.0)), ev("s", noisy(1.0), problem="q")], problems=["p", "q"])
    b = _stored(tmp_path, [ev("s", noisy(1.0, seed=2))], problems=["p", "q", "r"], finish=False)
    _kill_its_process(b)
    result = compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01)
    expected = f"the after run {b.run_id} is incomplete: its process is gone and 2 of its 3 selected problems never ran"
    assert result.warnings == (expected,)
    out = CliRunner().invoke(app, ["compare", a.run_id, b.run_id, "--results-dir", str(tmp_path)])
    assert out.exit_code == 0 and f"[warning] the after run {b.run_id} is incomplete" in out.output


def test_compare_warns_about_a_run_still_running_interrupted_or_from_an_older_kbench(tmp_path):
    import json

    a = _stored(tmp_path, [ev("s", noisy(1.0))], problems=["p"], finish=False)  # this process: still running
    b = _stored(tmp_path, [ev("s", noisy(1.0))], problems=["p", "q"], finish=False)
    b.finish("interrupted")
    assert compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01).warnings == (
        f"the before run {a.run_id} is still running",
        f"the after run {b.run_id} was interrupted: 1 of its 2 selected problems never ran",
    )
    old = json.loads((a.directory / "run.json").read_text())
    del old["process"]  # a file from before kbench recorded its process
    (a.directory / "run.json").write_text(json.dumps(old))
    (warning, _) = compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01).warnings
    assert warning == (f"the before run {a.run_id} is incomplete: it is still marked running but does not name "
                       "its process, so it was probably stopped")


def test_the_compare_page_shows_the_summary_and_the_one_run_only_problems_once(tmp_path):
    from kbench.reports import html

    a, b = _twenty_problem_pair(tmp_path)
    page = html.write_html_compare(compare.compare(a.run_id, b.run_id, None, tmp_path, 0.01)).read_text()
    head = page.split('id="comparison"')[0]  # what comes before the table of rows
    assert '<p id="verdict"><strong>3 rows: 0 faster, 0 slower, 1 same, 0 unclear;' in head
    assert 'id="only-before"' in head and "20 problems (40 rows)" in head and "old19" in head
    assert 'id="only-after"' in head and "1 problem (1 row)" in head
    assert 'data-problem="old0"' not in page and 'data-problem="fresh"' not in page and 'data-problem="p"' in page
    assert page.count('class="removed"') == 1  # p's dropped solution, the one removed row


def test_across_machines_rows_compare_by_their_own_runs_eager_and_the_largest_change_comes_first():
    """On a GPU twice as fast every time halves: that is the hardware, the same speedup reads `same`. A copy whose
    speedup went from 1.00x to 0.77x reads `slower` and comes first, a 2% change after it."""
    before = run("a", ev("steady", noisy(2.0, seed=1), problem="p1", eager=noisy(4.0, seed=2)),
                 ev("copy", noisy(4.0, seed=3), problem="p2", eager=noisy(4.0, seed=4)),
                 ev("small", noisy(2.0, seed=5), problem="p3", eager=noisy(2.0, seed=6)))
    after = run("b", ev("steady", noisy(1.0, seed=7), problem="p1", eager=noisy(2.0, seed=8)),
                ev("copy", noisy(2.6, seed=9), problem="p2", eager=noisy(2.0, seed=10)),
                ev("small", noisy(1.02, seed=11), problem="p3", eager=noisy(1.0, seed=12)), gpu="NVIDIA B200")
    rows = compare.compare_runs(before, after, 0.01, ignore_env=True)
    assert [(r.solution, r.change) for r in rows] == [("copy", "slower"), ("small", "slower"), ("steady", "same")]
    copy = rows[0]
    assert copy.before_x == pytest.approx(1.0, abs=0.01) and copy.after_x == pytest.approx(0.77, abs=0.01)
    assert copy.x_ratio == pytest.approx(0.77, abs=0.01) and copy.ratio == pytest.approx(0.65, abs=0.01)


def test_on_one_machine_the_largest_time_change_comes_first_and_status_changes_before_it():
    before = run("a", ev("a", noisy(1.0, seed=1)), ev("b", noisy(1.0, seed=2)), ev("c", noisy(1.0, seed=3)))
    after = run("b", ev("a", noisy(1.05, seed=4)), ev("b", noisy(1.5, seed=5)), ev("c", status=Status.INCORRECT))
    assert [(r.solution, r.change) for r in compare.compare_runs(before, after, 0.01)] == [
        ("c", "newly failing"), ("b", "slower"), ("a", "slower")]


def test_the_cli_gives_the_suites_change_and_lists_only_changes_when_asked(tmp_path):
    import time

    def rows(copy_ms, seeds):
        return [ev("eager", noisy(2.0, seed=seeds), problem=f"p{i}", eager=noisy(2.0, seed=seeds + 1))
                for i in range(3)] + [
            ev("same", noisy(2.0, seed=seeds + 2), problem="p0", eager=noisy(2.0, seed=seeds + 3)),
            ev("fast", noisy(copy_ms, seed=seeds + 4), problem="p1", eager=noisy(2.0, seed=seeds + 5))]

    a = _stored(tmp_path, rows(2.0, 10))
    time.sleep(1.1)
    b = _stored(tmp_path, rows(1.0, 20))
    out = CliRunner().invoke(app, ["compare", a.run_id, b.run_id, "--results-dir", str(tmp_path), "--changes-only"])
    assert out.exit_code == 0, out.output
    text = out.output.replace("\n  ", " ")  # the prose above the table, unwrapped
    suite = next(line for line in text.splitlines() if line.startswith("suite ("))
    assert "fast_1 0% -> 33%" in suite and "fast_2 0% -> 0%" in suite  # 2.00x is no significant win over 2
    table = text.split(suite)[1]
    assert "fast" in table and " same " not in table and "2.00x" in table  # the same rows left out; speedups shown


def _suite_pair(n=100):
    """Two runs of a KernelBench-sized suite with KernelBench-long names: every row the same but one honest copy, which
    went from 1.00x to 0.77x."""
    name = "L2_{}_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool"
    before, after = [], []
    for i in range(1, n + 1):
        eager = noisy(5.0, seed=i)
        before += [ev("eager", eager, problem=name.format(i)),
                   ev("honest", noisy(5.0, seed=500 + i), problem=name.format(i), eager=eager)]
        slowed = noisy(5.0 / 0.77 if i == 77 else 5.0, seed=900 + i)
        after += [ev("eager", noisy(5.0, seed=i), problem=name.format(i)),
                  ev("honest", slowed, problem=name.format(i), eager=noisy(5.0, seed=300 + i))]
    return run("a", *before), run("b", *after)


def test_the_terminal_comparison_of_a_suite_fits_120_columns_and_folds_what_says_nothing():
    """Issue 41 item 7: 200 rows 182 columns wide, eager rows 1.00x -> 1.00x mixed in; the one real change first."""
    from kbench.reports.tables import comparison_frame, readable_comparison, render

    rows = compare.compare_runs(*_suite_pair(), 0.01)
    frame, notes = readable_comparison(rows)
    assert len(frame) == 100 and set(frame["solution"]) == {"honest"}  # the same eager rows are counted, not listed
    assert "100 reference row(s) (eager, torch.compile) the same in both runs, not listed" in notes[0]
    assert "size: full on every row" in notes and "status: correct in both runs on every row" in notes
    assert {"mark", "size", "before_status", "after_status"}.isdisjoint(frame.columns)
    text = render(frame, "table")
    assert max(len(line) for line in text.splitlines()) <= 120, max(text.splitlines(), key=len)
    first = text.splitlines()[3:5]  # two header lines and the rule, then the largest change, its name wrapped
    assert first[0].startswith("L2_77_ConvTranspose3d_Scale_") and "slower" in first[0] and "0.77x" in first[0]
    assert first[1].strip() == "BatchNorm_GlobalAvgPool"
    assert len(comparison_frame(rows)) == 200  # csv and json keep every row


def test_a_reference_row_that_changed_is_listed_and_a_changed_status_keeps_both_columns():
    from kbench.reports.tables import readable_comparison

    before = run("a", ev("eager", noisy(1.0, seed=1)), ev("s", noisy(1.0, seed=2)))
    after = run("b", ev("eager", noisy(1.2, seed=3)), ev("s", status=Status.INCORRECT))
    frame, notes = readable_comparison(compare.compare_runs(before, after, 0.01))
    assert list(frame["solution"]) == ["s", "eager"] and not any("reference row" in n for n in notes)
    assert {"before_status", "after_status"} <= set(frame.columns)


def test_a_long_name_wraps_after_underscores():
    from kbench.reports.tables import wrap_name

    assert wrap_name("L2_77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool", 32) == (
        "L2_77_ConvTranspose3d_Scale_\nBatchNorm_GlobalAvgPool")
    assert wrap_name("short", 32) == "short"
    assert wrap_name("a" * 40, 32) == "a" * 32 + "\n" + "a" * 8  # a word longer than the width is cut


def test_kbench_compare_of_a_suite_prints_within_120_columns(tmp_path):
    """Issue 41 item 7: the table, and the lines about both machines and the suite above it, at a terminal's width."""
    import time

    before, after = _suite_pair()
    first = RunStore.create(tmp_path, {"environment": {"gpu": {"name": "NVIDIA H100 80GB HBM3"},
                                                       "torch": "2.11.0+cu130"}, "config": {"math": {}}})
    first.evaluations = list(before.evaluations)
    first.finish()
    time.sleep(1.1)  # run ids have one-second resolution
    second = RunStore.create(tmp_path, {"environment": {"gpu": {"name": "NVIDIA H100 80GB HBM3"},
                                                        "torch": "2.11.0+cu130"}, "config": {"math": {}}})
    second.evaluations = list(after.evaluations)
    second.finish()
    result = CliRunner().invoke(app, ["compare", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    assert lines[0].startswith("before ") and any(line.startswith("suite (100 problems in both") for line in lines)
