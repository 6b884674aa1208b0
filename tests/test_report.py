"""The leaderboard: fast_p and geometric mean by hand, the report's text, the chart file."""

import dataclasses
import re

import pytest

from kbench.results.diagnostics import Diagnostics, Divisor, PlacementFigures, ProcessCheck, TimingProtocol
from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.reports import leaderboard
from kbench.reports.leaderboard import fast_p, ranked, summarize
from kbench.reports.report_text import WIDTH, markdown, write_report
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


def _timed(ms, spread=0.002, n=30):
    return Measurement(tuple(ms / 1e3 * (1 + spread * ((i * 7) % 11 - 5) / 5) for i in range(n)))


def test_rows_timed_on_different_gpus_rank_by_what_was_divided_side_by_side():
    """Issue 41 item 5: the eager row ran on a slower GPU (6 ms) than the solution (5 ms, beside an eager of 4 ms on
    its own GPU): the solution is 0.8x, slower than eager, whatever the two medians say."""
    rows = [_row("p", EAGER, 6.0, 6.0), _row("p", "slower", 5.0, 4.0), _row("p", "faster", 2.0, 4.0)]
    assert [e.solution for e in ranked(rows, "p")] == ["faster", EAGER, "slower"]
    no_speedup = [_row("p", EAGER, 6.0, None), _row("p", "s", 5.0, None)]  # no eager divided: by time
    assert [e.solution for e in ranked(no_speedup, "p")] == ["s", EAGER]


def _row(problem, solution, ms, eager_ms, status=Status.CORRECT, warnings=(), message=""):
    return Evaluation(problem=problem, solution=solution, status=status, device="cuda", size="full",
                      timing=_timed(ms) if ms else None, eager_timing=_timed(eager_ms) if eager_ms else None,
                      speedup_vs_eager=eager_ms / ms if ms and eager_ms else None, warnings=tuple(map(from_legacy, warnings)),
                      message=message)


ROWS = [
    _row("a", EAGER, 4.0, 4.0), _row("a", COMPILED, 2.0, 4.0),
    _row("a", "fast", 1.0, 4.0, warnings=["[gpu_throttled] the GPU was slowed by its power cap while this was timed "
                                          "(SM clock 1410 of 1980 MHz), so this time may be too high"]),
    _row("a", "copy", 3.98, 4.0), _row("a", "faked", 0.5, 4.0, status=Status.SUSPECT,
                                      message="outputs pass, timing not trusted: [timer_mismatch] too low"),
    _row("b", EAGER, 1.0, 1.0), _row("b", "broken", None, None, status=Status.INCORRECT, message="timed call 3: no"),
]
DOC = {"run_id": "R1", "state": "complete", "environment": {"gpu": {"name": "GPU X"}, "driver": "580", "torch": "2.11",
                                                             "kbench": "0.1.0"},
       "git": {"commit": "abcdef1234567890", "dirty": True}, "config": {"compile_baseline": True, "tolerance": "problem"}}


def test_the_report_says_what_to_trust_first_and_every_speedup_says_what_it_divided():
    text = markdown(DOC, ROWS)
    first = text.split("## Suite")[0]
    assert "abcdef123456 with uncommitted changes (dirty)" in first and "GPU X, driver 580" in first
    assert "suspect: a/faked: [timer_mismatch] too low" in first
    assert "weakened: a/fast: the GPU was throttled while it was timed" in first
    a = text.split("## a")[1].split("## b")[0]
    assert "| fast †" in a  # the fastest correct solution, marked: a warning weakens it
    fast = next(line for line in a.splitlines() if line.startswith("| 1 "))
    assert "4.00x" in fast and "4.000" in fast  # the speedup, and the eager ms it divided
    copy = next(line for line in a.splitlines() if "| copy" in line)
    assert "~1.01x (1.00-1.01)" in copy  # 4.00 against 3.98 ms: within noise, its interval above 1
    assert "withheld" in next(line for line in a.splitlines() if "| faked" in line)
    assert "- [1] fast: [gpu_throttled] the GPU was slowed by its power cap" in a  # a correct row's warning, whole
    assert fast.rstrip(" |").endswith("1")  # its footnote's number, in the table
    assert "- [1] broken: timed call 3: no" in text.split("## b")[1]
    assert all(len(line) <= WIDTH for line in text.splitlines()), max(text.splitlines(), key=len)


def test_a_baseline_that_was_not_measured_reads_not_measured_and_an_incomplete_run_says_so():
    doc = {**DOC, "config": {"compile_baseline": False}, "state": "running"}
    rows = [r for r in ROWS if r.solution != COMPILED]
    text = markdown(doc, rows)
    assert "torch.compile: not measured" in text.split("## Suite")[0]
    assert "vs torch.compile: not measured in this run." in text.split("## Suite")[1].split("## a")[0]
    assert "vs compile" not in text.split("## a")[1]  # a column of "not measured" only: the suite says it once
    assert "incomplete run: still running" in text
    clean = markdown({**DOC, "git": {"commit": "abc", "dirty": False}}, [ROWS[0], ROWS[1], ROWS[3]])
    assert "Nothing to flag" in clean


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


def test_a_real_runs_report_stays_within_the_terminal_with_a_long_provenance():
    doc = {**DOC, "environment": {**DOC["environment"], "cpu": "x" * 300}}
    rows = [dataclasses.replace(r, timing=dataclasses.replace(r.timing, regime="gpu")) if r.timing else r for r in ROWS]
    text = markdown(doc, rows)
    assert "in the GPU regime" in text and all(len(line) <= WIDTH for line in text.splitlines())


def test_a_killed_run_reads_incomplete_with_how_to_finish_it(tmp_path):
    """Issue 31: a run whose process was killed read "state running, all 0" as if it were complete."""
    import json

    store = RunStore.create(tmp_path, {"environment": {"gpu": {"name": "G"}, "torch": "t"}})
    store.add(ROWS[0])
    doc = json.loads((store.directory / "run.json").read_text())
    doc["process"] = {"pid": 2**22 + 12345, "host": doc["process"]["host"], "boot_id": doc["process"]["boot_id"]}
    (store.directory / "run.json").write_text(json.dumps(doc))  # as if its process had been killed
    md, _, text = write_report(str(store.directory), tmp_path, with_chart=False)
    box = text.split("## Before you quote these numbers")[1].split("## Suite")[0]
    assert "its process is gone and it never finished" in box and f"--resume {doc['run_id']}" in box
    from kbench.reports.html import write_html_report

    page = write_html_report(str(store.directory), tmp_path).read_text()
    assert "Incomplete run:" in page and "its process is gone" in page


def test_rows_spread_over_gpus_say_where_each_ran_and_the_process_check_is_summed_up():
    """Suites at scale: where each row ran shows in the table and the provenance when rows ran on more than one GPU,
    and the provenance says what the check of the judge's and the candidates' processes found and did."""
    from kbench.reports.caveats import provenance
    from kbench.reports.tables import results_frame, to_terminal

    def placed(problem, gpu, ratios, fresh=0, warnings=(), divisor=None):
        row = _row(problem, "honest", 1.0, 1.0, warnings=warnings)
        protocol = TimingProtocol(divisor=Divisor("witness", 30, 1e-3, 1e-3)) if divisor else None
        found = Diagnostics(processes=ProcessCheck(tuple(ratios), fresh), protocol=protocol)
        return dataclasses.replace(row, gpu=gpu, gpu_name="NVIDIA H100 80GB HBM3", diagnostics=found)

    disagree = ["[processes_disagree] the reference itself ran 1.300x as long"]
    rows = [placed("a", "0", [1.0]), placed("b", "1", [1.3, 1.0], fresh=1),
            placed("c", "2", [1.3, 1.3, 1.3], fresh=2, warnings=disagree), placed("d", "3", [0.97], divisor=True)]
    table = to_terminal(results_frame(rows))
    header = next(line for line in table.splitlines() if line.startswith("problem"))
    at = header.index(" gpu ") + 1
    rows_shown = [line for line in table.splitlines() if line[:1] in "abcd" and line[1:2] == " "]
    assert [line[at:at + 3].strip() for line in rows_shown] == list("0123")
    assert "gpu_name NVIDIA H100 80GB HBM3 (every row)" in table  # one model: a line above the table
    found = provenance({"environment": {"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "torch": "t"}}, rows)
    assert "rows spread over 4 GPUs" in found.device and "3 (NVIDIA H100 80GB HBM3): 1" in found.device
    assert found.processes == ("2 of 4 row(s) agreed in their first candidate process; 1 went into a fresh candidate "
                               "process and agreed there; 1 disagreed in every process tried: suspect, no speedup; 1 "
                               "host-regime row(s) divided by a witness process, not the judge's eager")
    alone = [dataclasses.replace(r, gpu=None, gpu_name=None) for r in rows[:1]]
    assert "spread" not in provenance({"environment": {}}, alone).device
    # the check after the solution's rounds: counted apart from the one before the import
    apart = ["[processes_disagree] after the solution's rounds the reference itself ran 0.770x as long"]
    after = [dataclasses.replace(placed("e", "0", [1.0]), diagnostics=Diagnostics(
                 processes=ProcessCheck((1.0,), 0, after=1.01))),
             dataclasses.replace(placed("f", "1", [1.0], warnings=apart), diagnostics=Diagnostics(
                 processes=ProcessCheck((1.0,), 0, after=0.77, after_disagrees=True))),
             dataclasses.replace(placed("g", "2", [1.3, 1.3, 1.3], fresh=2, warnings=disagree), diagnostics=Diagnostics(
                 processes=ProcessCheck((1.3, 1.3, 1.3), 2, disagrees=True, after=0.76, after_disagrees=True))),
             dataclasses.replace(placed("h", "3", [1.0, 1.0]), diagnostics=Diagnostics(
                 processes=ProcessCheck((1.0, 1.0), 1, after=1.0, after_retries=1)))]
    assert provenance({"environment": {}}, after).processes == (
        "3 of 4 row(s) agreed in their first candidate process; 0 went into a fresh candidate process and agreed "
        "there; 1 disagreed in every process tried: suspect, no speedup; 4 timed the reference again in the "
        "candidate's process after the solution's rounds, 1 agreeing only in a fresh candidate process, 2 apart from "
        "the judge's in every process tried: suspect, no speedup")
    unchecked = [dataclasses.replace(placed("m", "0", [1.0], warnings=["[processes_unchecked] could not be timed"]),
                                     diagnostics=Diagnostics(processes=ProcessCheck(
                                         (1.31,), 2, after_retries=2, after_unmeasured=True)))]
    assert provenance({"environment": {}}, after + unchecked).processes.endswith(
        "2 apart from the judge's in every process tried: suspect, no speedup; 1 could not time the reference again "
        "there, in every process tried: suspect, no speedup")
    assert "gpu" not in to_terminal(results_frame(alone))
    # the big calls whose memory both sides drew: how many, and how many ran at another speed on other memory
    steady = PlacementFigures(rounds=2, draws=4, groups=6, solution_groups_kept=6, eager_groups_kept=6)
    moved = PlacementFigures(rounds=2, draws=8, groups=9, solution_groups_kept=4, eager_groups_kept=9)
    drew = [dataclasses.replace(placed(n, "0", [1.0]), diagnostics=Diagnostics(
                processes=ProcessCheck((1.0,), 0), protocol=TimingProtocol(placements=figures)))
            for n, figures in (("i", steady), ("j", moved), ("k", None))]
    assert provenance({"environment": {}}, drew).processes.endswith(
        "; 2 big call(s) drew their memory anew every few rounds, 1 of them at another speed on other memory: timed "
        "on each side's fastest draws")
    stuck = dataclasses.replace(moved, stuck="solution")
    drew.append(dataclasses.replace(placed("l", "1", [0.77]), diagnostics=Diagnostics(
        processes=ProcessCheck((1.0,), 2, after_disagrees=True, after_retries=2),
        protocol=TimingProtocol(placements=stuck))))
    assert provenance({"environment": {}}, drew).processes.endswith(
        "; 3 big call(s) drew their memory anew every few rounds, 2 of them at another speed on other memory: timed "
        "on each side's fastest draws, 1 with a side at the other's slow memory on every draw, in every process "
        "tried: suspect, no speedup")


def test_a_row_of_a_spread_run_records_its_gpus_model_from_the_probe():
    from kbench.commands.evaluation import Plan, on_gpu
    from kbench.execution.executor import Executor
    from kbench.execution.warm_starts import WarmStarts

    executor = Executor("local", ("2", "3"), WarmStarts(ahead=False), pins=True)
    plan = Plan(config=None, device="cuda", size="full", env={"gpu": {"name": "A", "names": ["A", "B"]}},
                build=None, executor=executor)
    row = _row("p", "s", 1.0, 1.0)
    assert (on_gpu(row, "3", plan).gpu, on_gpu(row, "3", plan).gpu_name) == ("3", "B")
    assert on_gpu(row, None, plan) is row


def test_a_check_kbench_could_not_run_is_its_note_not_a_weakness_of_the_row():
    from kbench.reports.caveats import caveats

    row = _row("p", "s", 1.0, 2.0, warnings=["[check_skipped] float64 accuracy could not run: RuntimeError: mat1 and "
                                             "mat2 must have the same dtype, but got Double and Float"])
    found = caveats({"config": {"compile_baseline": False}}, [row])
    assert found.weakened == ()
    throttled = _row("p", "t", 1.0, 2.0, warnings=["[gpu_throttled] the GPU was slowed while this was timed"])
    assert [e.solution for e, _ in caveats({}, [throttled]).weakened] == ["t"]


def test_problems_sort_by_their_numbers_not_as_text():
    """L2_100, L2_10, ..., L2_1, L2_20 read as text order in a 100-problem report (issue: suite reports)."""
    from kbench.results.records import problem_order

    names = ["L2_100", "L2_10", "L2_2", "L2_1", "L2_20", "conv3d_gelu", "L1_3"]
    assert sorted(names, key=problem_order) == ["L1_3", "L2_1", "L2_2", "L2_10", "L2_20", "L2_100", "conv3d_gelu"]
    rows = [_row(p, EAGER, 2.0, 2.0) for p in ("L2_10", "L2_9", "L2_100")]
    text = markdown({"config": {}}, rows)
    assert text.index("L2_9") < text.index("L2_10") < text.index("L2_100")


def _suite(problems=40):
    """A suite whose every honest copy was timed on a busy GPU and is plain PyTorch, and one problem whose eager
    output is mostly zeros."""
    busy = "[gpu_busy] 1 other process(es) held a context on this GPU while this was timed"
    plain = "[no_custom_kernel] line 9: no load_inline; the solution is plain PyTorch"
    rows = []
    for i in range(1, problems + 1):
        rows.append(_row(f"L2_{i}_P", EAGER, 2.0, 2.0, warnings=["[degenerate_zeros] 51% of the outputs are exactly "
                                                                 "zero"] if i == 7 else []))
        rows.append(_row(f"L2_{i}_P", "honest", 2.0, 2.0, warnings=[plain, busy]))
    return rows


def test_a_weakness_of_many_rows_is_one_line_that_counts_them_and_names_a_few():
    first = markdown(DOC, _suite()).split("## Suite")[0]
    lines = [line for line in first.splitlines() if "gpu_busy" in line or "other processes held" in line]
    assert len([line for line in first.splitlines() if line.startswith("- weakened")]) == 1
    assert "weakened, 40 rows: other processes held the GPU while it was timed [gpu_busy]" in " ".join(lines)
    assert "L2_1_P/honest, L2_2_P/honest, L2_3_P/honest, L2_4_P/honest, L2_5_P/honest and 35 more" in " ".join(
        first.split())  # in problem order, the first five, then a count


def test_warnings_on_many_rows_are_said_once_and_not_under_each_problem():
    text = markdown(DOC, _suite())
    notes = text.split("## Notes on many rows")[1].split("## L2_1_P")[0]
    assert "[no_custom_kernel] on 40 of 80 rows (honest)" in " ".join(notes.split())
    assert "[gpu_busy] on 40 of 80 rows" in " ".join(notes.split())
    problems = text.split("## L2_1_P")[1]
    assert "[no_custom_kernel]" not in problems and "[gpu_busy]" not in problems  # no footnote repeats them
    honest = next(line for line in problems.splitlines() if "| honest" in line)
    assert "no_custom_kernel, gpu_busy" in honest  # but each row still says it has them
    assert "[degenerate_zeros] 51% of the outputs" in problems  # one row's note stays with its problem
    few = markdown(DOC, _suite(problems=4))  # a short run keeps every note under its problem
    assert "## Notes on many rows" not in few and few.count("[no_custom_kernel]") == 4


def test_the_html_box_folds_a_weakness_of_many_rows_into_one_item_with_links():
    from kbench.reports.html import report_html

    page = report_html(DOC, _suite())
    box = page.split('id="before-you-quote"')[1].split("</section>")[0]
    assert box.count('<li class="weakened">') == 1
    weakened = box.split('<li class="weakened">')[1].split("</li>")[0]
    assert "(40 rows)" in weakened and '>35 more</a>' in weakened and weakened.count('<a href="#') == 6  # 5 and the rest


def _suspects(many=12):
    """A suite with `many` rows suspect for one reason (processes that disagree) and one for another."""
    disagree = "[processes_disagree] the reference took 6.41 ms in the candidate's process and 4.92 ms in the judge's"
    rows = []
    for i in range(1, many + 1):
        rows += [_row(f"L2_{i}_P", EAGER, 2.0, 2.0),
                 _row(f"L2_{i}_P", "honest", 2.0, 2.0, status=Status.SUSPECT, warnings=[disagree],
                      message=f"outputs pass, timing not trusted: {disagree}")]
    clock = "[clock_patched] the solution replaced torch.cuda.Event in its process"
    return rows + [_row("L2_99_P", EAGER, 2.0, 2.0), _row("L2_99_P", "patched", 1.0, 2.0, status=Status.SUSPECT,
                                                          warnings=[clock], message=f"outputs pass, timing not trusted: {clock}")]


def test_a_warning_on_ten_rows_of_many_is_said_once_however_small_its_share():
    """Issue 41 item 6: a code on 20 of 200 rows printed 20 footnotes (folding asked for a quarter of the rows too)."""
    busy = "[machine_busy] other processes kept 21.7 of 64 CPU cores busy while this was timed"
    rows = []
    for i in range(1, 101):
        rows += [_row(f"L2_{i}_P", EAGER, 2.0, 2.0), _row(f"L2_{i}_P", "honest", 2.0, 2.0,
                                                          warnings=[busy] if i <= 20 else [])]
    text = markdown(DOC, rows)
    notes = " ".join(text.split("## Notes on many rows")[1].split("## L2_1_P")[0].split())
    assert "[machine_busy] on 20 of 200 rows (honest)" in notes
    assert text.count("other processes kept 21.7 of 64 CPU cores busy") == 1  # said once, not under 20 problems
    nine = [r for r in rows if not (r.problem in {f"L2_{i}_P" for i in range(10, 21)})]
    assert "## Notes on many rows" not in markdown(DOC, nine)  # on 9 rows: under each problem


def test_suspect_rows_of_one_kind_are_one_line_that_counts_them_and_a_lone_one_keeps_its_reason():
    first = " ".join(markdown(DOC, _suspects()).split("## Suite")[0].split())
    assert ("suspect, 12 rows: the reference's time differed between processes [processes_disagree]: L2_1_P/honest, "
            "L2_2_P/honest, L2_3_P/honest, L2_4_P/honest, L2_5_P/honest and 7 more") in first
    assert "suspect: L2_99_P/patched: [clock_patched] the solution replaced torch.cuda.Event in its process" in first
    assert first.count("suspect") == 2 + first.count("suspect rows")  # no line per row


def test_the_html_box_groups_suspects_with_a_count_and_links_to_the_rest():
    from kbench.reports.html import report_html

    box = report_html(DOC, _suspects()).split('id="before-you-quote"')[1].split("</section>")[0]
    items = box.split('<li class="suspect">')[1:]
    assert len(items) == 2
    many, lone = (items if "12 rows" in items[0] else items[::-1])
    assert "[processes_disagree]" in many and many.count('<a href="#') == 6  # five names and "7 more"
    assert ">7 more</a>" in many and "L2_99_P / patched" in lone


def test_the_suite_counts_verdicts_and_quotes_fast_p_below_1_as_not_slower_than_p():
    """fast_0.5 and fast_0.8 (the thresholds KernelBench users quote) count a correct solution whose interval lies
    above p: a 0.9x one (0.89-0.91) is a fast_0.8 but no fast_1 win."""
    rows = [_row("a", EAGER, 1.0, 1.0), _row("a", "slower", 1.0 / 0.9, 1.0), _row("b", EAGER, 1.0, 1.0),
            _row("b", "broken", None, None, status=Status.INCORRECT, message="no")]
    suite = markdown(DOC, rows).split("## Suite")[1].split("## a")[0]
    assert "Verdicts of the 2 solution row(s): 1 correct, 1 incorrect; compiled 100%, correct 50%." in suite
    nothing_built = [_row("b", EAGER, 1.0, 1.0), _row("b", "x", None, None, status=Status.COMPILE_ERROR),
                     _row("b", "y", None, None, status=Status.LOAD_ERROR), _row("b", "z", 2.0, 1.0)]
    assert leaderboard.rates(nothing_built) == "compiled 33%, correct 33%"  # KernelBench's compile and correct rates
    header = next(line for line in suite.splitlines() if line.startswith("| baseline"))
    wins = next(line for line in suite.splitlines() if "significant wins" in line)
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in wins.split("|")]))
    assert (cells["fast_0.5"], cells["fast_0.8"], cells["fast_1"]) == ("50%", "50%", "0%")


def test_problems_whose_reference_is_degenerate_are_counted_before_the_numbers():
    first = " ".join(markdown(DOC, _suite()).split("## Suite")[0].split())
    assert ("degenerate problems, 1: most of the reference's output is exactly zero [degenerate_zeros]: L2_7_P"
            in first)
    from kbench.reports.html import report_html

    box = report_html(DOC, _suite()).split('id="before-you-quote"')[1].split("</section>")[0]
    assert box.count('<li class="degenerate">') == 1 and "L2_7_P" in box
    page = report_html({**DOC, "config": {"compile_baseline": False}}, _suite())
    assert '<a href="#p6">L2_7_P</a>' in page  # each names a link to its problem's section
    problems_table = page.split('id="problems"')[1].split("</table>")[0]
    assert "vs compile" not in problems_table and "not measured" not in problems_table  # the box says it once


def test_the_fastest_solution_of_a_degenerate_problem_is_marked_as_weakened_and_says_why():
    """Issue 41 item 4: a solution returning zeros may be correct where most of the reference's output is zero; its
    row was the problem's headline with no mark."""
    zeros = "[degenerate_zeros] 51% of the outputs are exactly zero"
    rows = [_row("z", EAGER, 2.0, 2.0, warnings=[zeros]), _row("z", "zeros", 0.5, 2.0), _row("y", EAGER, 2.0, 2.0),
            _row("y", "fine", 1.0, 2.0)]
    text = markdown(DOC, rows)
    z, y = text.split("## z")[1], text.split("## y")[1].split("## z")[0]
    assert "| zeros †" in z and "† the problem's reference tells right from wrong poorly (degenerate" in z
    assert "†" not in y
    from kbench.reports.html import report_html

    page = report_html(DOC, rows)
    problems_table = page.split('id="problems"')[1].split("</table>")[0]
    assert problems_table.count('class="dagger"') == 1
    # fast_p counted the degenerate problem as a win; a line beside it leaves such problems out
    suite = " ".join(text.split("## Suite")[1].split("## y")[0].split())
    assert "| vs eager: significant wins | 100% |" in suite
    assert "| the same without 1 degenerate | 100% | 100% | 100% | 100% | 100% | 0% | |" in suite
    sound = page.split('id="fast-p-sound"')[1].split("</tr>")[0]
    assert "without 1 degenerate problem(s)" in sound and sound.count("100%") == 5
    assert 'id="fast-p-sound"' not in report_html(DOC, rows[2:])  # none degenerate: no such line


def test_a_problem_whose_rows_ran_on_several_gpus_says_where_each_ran():
    """Issue 41 item 5: the GPU of each row showed only in per-row cards far down the HTML."""
    import dataclasses

    from kbench.reports.html import embedded_sections, report_html

    h100 = "NVIDIA H100 80GB HBM3"
    rows = [dataclasses.replace(_row("a", EAGER, 2.0, 2.0), gpu="3", gpu_name=h100),
            dataclasses.replace(_row("a", "fast", 1.0, 2.0), gpu="1", gpu_name=h100),
            dataclasses.replace(_row("a", "copy", 2.0, 2.0), gpu="1", gpu_name=h100),
            dataclasses.replace(_row("b", EAGER, 2.0, 2.0), gpu="0", gpu_name=h100),
            dataclasses.replace(_row("b", "same_gpu", 1.0, 2.0), gpu="0", gpu_name=h100)]
    where = f"Rows ran on 2 GPUs: GPU 1 ({h100}): fast, copy; GPU 3 ({h100}): eager."
    text = markdown(DOC, rows)
    assert where in " ".join(text.split("## a")[1].split()) and "Rows ran on" not in text.split("## b")[1]
    # and each row's GPU as a column of the problem's table, there only
    table_a = [line for line in text.split("## a")[1].split("## b")[0].splitlines() if line.startswith("|")]
    cells = {line.split("|")[2].strip(): line.split("|")[4].strip() for line in table_a[2:]}
    assert table_a[0].split("|")[4].strip() == "gpu" and cells == {"fast": "1", "copy": "1", EAGER: "3"}
    assert "| gpu" not in text.split("## b")[1]
    stored = report_html(DOC, rows)
    page = stored + embedded_sections(stored)
    assert page.count('class="muted gpus"') == 1 and where in page


def test_rows_timed_in_the_host_regime_or_divided_by_a_witness_are_counted_in_the_box():
    """Issue 41 goal 1: how a number was measured weakens it too (host-regime honest copies read up to 1.03x) and no
    row's warning said so."""
    import dataclasses

    from kbench.reports.html import report_html
    from kbench.results.diagnostics import Diagnostics, Divisor, TimingProtocol

    def host(row):
        return dataclasses.replace(row, timing=dataclasses.replace(row.timing, regime="host"))

    witnessed = Diagnostics(protocol=TimingProtocol(divisor=Divisor("witness", 20, 1.9e-3, 2.0e-3)))
    rows = [_row("a", EAGER, 2.0, 2.0), host(_row("a", "launchy", 1.0, 2.0)), _row("b", EAGER, 2.0, 2.0),
            dataclasses.replace(host(_row("b", "divided", 1.0, 2.0)), diagnostics=witnessed),
            _row("c", EAGER, 2.0, 2.0), _row("c", "gpu_side", 1.0, 2.0)]
    first = " ".join(markdown(DOC, rows).split("## Suite")[0].split())
    assert "measured, 2 row(s): timed in the host regime (launch-bound calls)" in first
    assert "a/launchy, b/divided" in first and "c/gpu_side" not in first
    assert "measured, 1 row(s): divided by the reference timed in a witness process" in first
    box = report_html(DOC, rows).split('id="before-you-quote"')[1].split("</section>")[0]
    assert box.count('<li class="measured">') == 2 and box.count('<a href="#') >= 3
    # the eager beside a solution at 2.16 ms, its problem's eager row at 2.0 ms: the reference ran at two speeds
    apart = [*rows, _row("d", EAGER, 2.0, 2.0), _row("d", "beside_slower", 2.0, 2.16), _row("d", "close", 2.0, 2.04)]
    first = " ".join(markdown(DOC, apart).split("## Suite")[0].split())
    assert ("measured, 1 row(s): the eager timed beside them differs from their problem's eager row by more than 3%"
            in first and "d/beside_slower" in first and "d/close" not in first)
    # a row whose speed moved with its memory: timed on each side's fastest draws, the rest left out
    from kbench.results.diagnostics import PlacementFigures

    def drew(row, kept):
        figures = PlacementFigures(rounds=2, draws=12, groups=12, solution_groups_kept=kept, eager_groups_kept=12)
        return dataclasses.replace(row, diagnostics=Diagnostics(protocol=TimingProtocol(placements=figures)))

    placed = [_row("e", EAGER, 2.0, 2.0), drew(_row("e", "moved", 2.0, 2.0), 5), drew(_row("e", "steady", 2.0, 2.0), 12)]
    first = " ".join(markdown(DOC, placed).split("## Suite")[0].split())
    assert "measured, 1 row(s): ran at another speed on other memory" in first
    assert "e/moved" in first and "e/steady" not in first


def test_the_html_colours_a_win_and_a_slowdown_apart_and_leaves_noise_plain():
    from kbench.reports.html import embedded_sections, report_html

    rows = [_row("a", EAGER, 4.0, 4.0), _row("a", "win", 2.0, 4.0), _row("a", "slow", 5.2, 4.0),
            _row("a", "copy", 4.0, 4.0)]
    stored = report_html({**DOC, "config": {"compile_baseline": False}}, rows)
    page = stored + embedded_sections(stored)
    cells = re.findall(r'<td class="n speedup([^"]*)"[^>]*>([^<]*)</td>', page)
    tones = {text.strip(): tone.strip() for tone, text in cells if text.strip()}
    assert tones["2.00x"] == "win" and tones["0.77x slower"] == "slower"
    assert [tone for text, tone in tones.items() if text.startswith("≈1x")] == [""]
