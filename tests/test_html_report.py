"""The HTML report and compare page: escaping, the --html options, and the pages as headless Chromium renders them."""

from __future__ import annotations

import dataclasses
import io
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.cli import app
from kbench.reports import html, reproduce, strips
from kbench.reports.compare import Comparison, compare_runs
from kbench.results.codec import decode
from kbench.results.figures import Accuracy, Floor, KernelShare, PeakMemory
from kbench.results.records import (
    COMPILED,
    EAGER,
    CompileInfo,
    Evaluation,
    Measurement,
    Speedups,
    Status,
    TrialResult,
)
from kbench.results.storage import RunStore, load

CHROMIUM = Path(os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Text a hostile solution could put in its messages, warnings and compiler output.
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
LOG_LINES = 3000


def samples(center_ms: float, n: int = 120, spread: float = 0.03, seed: int = 0) -> Measurement:
    rng = random.Random(seed)
    return Measurement(tuple(center_ms / 1e3 * (1 + abs(rng.gauss(0, spread))) for _ in range(n)))


TYPED = {"floor": Floor, "accuracy": Accuracy, "kernels": KernelShare, "peak": PeakMemory}


def with_figures(e: Evaluation, **figures: object) -> Evaluation:
    """The one place the fixtures set floor, accuracy, kernels, phases, peak memory and GPU (typed fields; what has
    no field goes to `extra`)."""
    typed = {k: decode(TYPED[k], v) if k in TYPED else v
             for k, v in figures.items() if k in TYPED or k in ("percent_of_floor", "phases", "gpu")}
    extra = {k: v for k, v in figures.items() if k not in TYPED and k not in ("percent_of_floor", "phases", "gpu")}
    return dataclasses.replace(e, **typed, extra={**e.extra, **extra})


def row(problem: str, solution: str, status: Status = Status.CORRECT, ms: float | None = None, eager_ms: float = 4.0,
        compile_ms: float = 2.0, **fields: object) -> Evaluation:
    timing = samples(ms, seed=sum(map(ord, solution))) if ms else None
    speedups = {"speedup_vs_eager": eager_ms / ms, "speedup_vs_compile": compile_ms / ms} if ms and status == Status.CORRECT else {}
    base = {"problem": problem, "solution": solution, "status": status, "device": "cuda", "size": "full",
            "timing": timing, "eager_timing": samples(eager_ms, seed=7) if timing else None, **speedups}
    return Evaluation(**{**base, **fields})


def long_log() -> str:
    lines = [f"[{i}/{LOG_LINES}] nvcc -c kernel.cu -o kernel.o  # step {i}" for i in range(LOG_LINES)]
    lines[LOG_LINES - 100] = f"/tmp/ext/kernel.cu(42): error: identifier {HOSTILE} is undefined"
    return "\n".join(lines)


def problem_rows(problem: str = "conv") -> list[Evaluation]:
    """Every status, a suspect row with its withheld speedups, hostile text, a long compiler log."""
    ok = CompileInfo(ok=True, seconds=31.5, log="ninja: no work to do.", cache_key="abc123")
    trials = tuple(TrialResult(seed=43 + i, passed=True, max_abs_err=1e-6 * (i + 1), max_rel_err=1e-5, mismatched=0,
                               numel=4096) for i in range(3))
    return [
        with_figures(row(problem, EAGER, ms=4.0, speedup_vs_eager=1.0, speedup_vs_compile=None),
                     floor={"seconds": 2e-4, "memory_s": 2e-4, "compute_s": 1e-4, "bound": "memory",
                            "work": {"flops": 1e8, "bytes": 6e8},
                            "ceilings": {"name": "H100", "bandwidth_bytes_s": 3e12, "flops_s": 5e14, "flops_kind": "tf32",
                                         "measured_at": "2026-11-25"}}),
        row(problem, COMPILED, ms=2.0, speedup_vs_eager=2.0, speedup_vs_compile=1.0),
        with_figures(row(problem, "fast", ms=1.0, compile=ok, trials=trials, warnings=(Finding(FindingCode.MONKEY_PATCH, HOSTILE),),
                         size_checks={"small": trials[:2]}),
                     accuracy={"solution": 2e-6, "reference": 1e-6, "tf32": 3e-4}, percent_of_floor=20.0,
                     kernels={"profiled": True, "own_s": 9e-4, "library_s": 1e-4, "own_share": 0.9,
                              "kernels_declared": ["fused_kernel"], "top": [["fused_kernel", 900.0]]},
                     phases={"calibrate": 1.5, "load": 0.4, "trials": 2.0, "timing": 3.0}, gpu="0",
                     peak={"solution": 64 * 2**20, "reference": 96 * 2**20}),
        row(problem, "slow", ms=3.0, compile=ok, trials=trials),
        with_figures(row(problem, "cheat", Status.SUSPECT, ms=0.01, trials=trials,
                         message="outputs pass, timing not trusted: [escaped_timer] work ran outside the timed interval",
                         warnings=(Finding(FindingCode.ESCAPED_TIMER, "work ran outside the timed interval"),),
                         withheld=Speedups(400.0, 200.0))),
        row(problem, "wrong", Status.INCORRECT, compile=ok, message="max abs error 0.5 at trial 2",
            trials=trials[:1] + (TrialResult(seed=44, passed=False, max_abs_err=0.5, message="0.5 > atol"),)),
        row(problem, "no_build", Status.COMPILE_ERROR, message="kernel.cu(42): error: identifier is undefined",
            compile=CompileInfo(ok=False, seconds=12.0, log=long_log(), cache_key="def456")),
        row(problem, "no_load", Status.LOAD_ERROR, message="SyntaxError: invalid syntax (line 3)"),
        row(problem, "boom", Status.RUNTIME_ERROR, compile=ok, message=f"RuntimeError: {HOSTILE}\nTraceback ..."),
        row(problem, "hangs", Status.TIMEOUT, message="no result after 900 s"),
        row(problem, "dies", Status.CRASHED, message="killed by signal 11 (SIGSEGV)"),
        row(problem, "elsewhere", Status.NOT_RUN, message="supports cpu only; this run is on cuda"),
    ]


HEADER = {"environment": {"gpu": {"name": "NVIDIA H100 80GB HBM3", "count": 1}, "torch": "2.11.0", "python": "3.12"},
          "git": {"commit": "0123abc", "dirty": False},
          "config": {"device": "cuda", "size": "full", "trials": 3, "seed": 42, "timeout_s": 900.0, "atol": None,
                     "math": {"cudnn_tf32": False, "matmul_tf32": False}, "timing": {"max_time_s": 2.0}},
          "selection": {"problems": [], "solution": None, "problems_dir": "/src/problems", "solutions_dir": "/src/solutions"},
          "problems": {"conv": {"origin": "KernelBench level 2", "atol": 0.01, "rtol": 0.01, "overrides": {"batch": 8}}}}


def store(results_dir: Path, evaluations: list[Evaluation], **header: object) -> Path:
    run = RunStore.create(results_dir, {**HEADER, **header})
    run.evaluations = list(evaluations)  # written once (run.add rewrites the file per row)
    run.finish()
    return run.directory


def suite(n: int = 50) -> list[Evaluation]:
    rows = []
    for i in range(n):
        p = f"problem_{i:02d}"
        rows += [row(p, EAGER, ms=4.0, speedup_vs_eager=1.0, speedup_vs_compile=None),
                 row(p, COMPILED, ms=2.0, speedup_vs_eager=2.0, speedup_vs_compile=1.0),
                 row(p, "a", ms=1.0 + i / n), row(p, "b", ms=3.0), row(p, "c", Status.INCORRECT, message="off by one")]
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = store(tmp_path_factory.mktemp("results"), problem_rows("conv") + problem_rows("gemm")[:4])
    return html.write_html_report(str(directory), directory.parent)


# --- the page as text -------------------------------------------------------------------------------------------


def whole(page: str) -> str:
    """A report page with its problems' sections inflated in place, as its script shows them."""
    return page + html.embedded_sections(page)


def test_text_from_solutions_is_escaped_everywhere(report: Path) -> None:
    stored = report.read_text()
    page = whole(stored)
    assert HOSTILE not in page and "<img" not in page and "onerror=\"" not in page
    assert stored.count("<script>") == 1 and page.count("<script>") == 1  # the report's own script, nothing else
    escaped = "&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;img src=x onerror=&#34;window.__pwned=2&#34;&gt;"
    assert page.count(escaped) >= 3  # the warning, the message, the compiler log


def test_the_page_is_self_contained(report: Path) -> None:
    page = report.read_text()
    assert "<link" not in page and "src=\"http" not in page and "@import" not in page
    assert "default-src 'none'" in page  # the content security policy: nothing is fetched when it is viewed


def test_every_row_has_a_detail_section_with_its_reproduce_command(report: Path) -> None:
    page = whole(report.read_text())
    assert page.count('<section class="detail') == len(problem_rows()) + 4
    assert "kbench run -p conv -s fast --device cuda --size full --trials 3 --no-tf32 --max-time 2" in page
    assert '<code class="first-error">kernel.cu(42): error: identifier &lt;script&gt;' in page
    assert f"... {LOG_LINES - html.LOG_HEAD - html.LOG_TAIL} lines left out here" in page  # a long log is cut
    assert "Speedups withheld from the leaderboard" in page and "400.00×" in page  # the suspect row's figures


def test_a_rows_typed_figures_appear_in_its_detail_and_its_problems_header(report: Path) -> None:
    page = whole(report.read_text())
    assert "Hardware floor 0.2000 ms (memory-bound: 600.0 MB at 3.0 TB/s)" in page
    assert "90% of the GPU time is in the solution's own kernels (0.9000 ms own, 0.1000 ms library per call)" in page
    assert "peak memory, solution</td><td class=\"mono\">64.0 MiB" in page
    assert "Accuracy against float64 (max abs error)" in page and "Phases (seconds)" in page


def test_reproduce_adds_only_the_options_that_differ_from_the_defaults() -> None:
    e = row("conv", "fast", ms=1.0)
    assert reproduce.run_command(e, {}) == "kbench run -p conv -s fast --device cuda --size full"
    assert reproduce.config_options({"trials": 5, "seed": 42, "timeout_s": 300.0, "compile_baseline": False,
                                     "two_sizes": False, "kernel_profile": False, "executor": "ray"}) == [
        "--timeout", "300", "--no-compile-baseline", "--one-size", "--no-kernel-profile"]
    doc = {"selection": {"problems_dir": "/x/probs", "solutions_dir": "/x/sols", "solution": "/x/my file.py"}}
    assert reproduce.run_command(row("conv", "my file", ms=1.0), doc) == (
        "kbench run -p conv -s '/x/my file.py' --device cuda --size full --problems-dir /x/probs --solutions-dir /x/sols")
    assert reproduce.run_command(row("conv", EAGER, ms=1.0), {}) == "kbench run -p conv --device cuda --size full"


def test_a_fifty_problem_suite_renders_in_well_under_a_second_per_problem(tmp_path: Path) -> None:
    rows = suite(50)
    start = time.perf_counter()
    stored = html.report_html({"run_id": "big", **HEADER}, rows)
    assert time.perf_counter() - start < 10
    page = whole(stored)
    assert page.count('<section class="detail') == len(rows) and page.count('<svg class="strips"') == 50
    assert len(stored) < 300_000 and len(page) > 4 * len(stored)  # stored compressed


def test_the_strip_chart_by_hand() -> None:
    assert strips.linear_ticks(0.0, 10.0) == [0, 2, 4, 6, 8, 10]
    assert strips.log_ticks(0.01, 10.0) == [0.01, 0.1, 1.0, 10.0]
    assert strips.log_ticks(1.5, 30.0) == [2.0, 5.0, 10.0, 20.0]  # fewer than three decades: 2x and 5x too
    assert strips.thin(list(range(100)), 5) == [0, 25, 50, 74, 99] and strips.thin([3, 1, 2]) == [1, 2, 3]
    chart = strips.chart([("a", "correct", [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]), ("none", "failed", ())])
    assert chart is not None and chart.unit == "ms" and not chart.log and len(chart.strips) == 1
    a = chart.strips[0]
    assert a.lo < a.q1 < a.median < a.q3 < a.hi and a.dots.count("h0") == 5
    assert "median 3 ms, quartiles 2-4 ms, range 1-5 ms, 5 samples" in a.title
    assert strips.chart([("a", "correct", [1e-6]), ("b", "correct", [1e-4])]).log  # 100x apart: a log axis
    assert strips.chart([("empty", "failed", ())]) is None


# --- the command line -------------------------------------------------------------------------------------------


def test_report_html_through_the_cli(tmp_path: Path) -> None:
    directory = store(tmp_path, problem_rows())
    result = CliRunner().invoke(app, ["report", directory.name, "--html", "--no-chart", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"html:   {directory / 'report.html'}" in result.output
    assert (directory / "report.html").read_text().startswith("<!DOCTYPE html>")
    baseline = tmp_path / "baselines" / "h100.json"  # a run file of another name gets a page of its name
    baseline.parent.mkdir()
    baseline.write_text((directory / "run.json").read_text())
    assert html.write_html_report("h100", tmp_path) == tmp_path / "baselines" / "h100.html"


def test_report_html_of_a_missing_run_is_one_error_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "nope", "--html", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and result.output.count("[error]") == 1 and "No run or baseline" in result.output


def compared(tmp_path: Path) -> tuple[Path, Path]:
    before = [row("p", EAGER, ms=4.0), row("p", "same", ms=1.0), row("p", "slower", ms=1.0), row("p", "breaks", ms=1.0),
              row("p", "fixed", Status.INCORRECT), row("p", "gone", ms=1.0)]
    after = [row("p", EAGER, ms=4.0), dataclasses.replace(row("p", "same", ms=1.0), timing=samples(1.0, seed=99)),
             row("p", "slower", ms=1.5), row("p", "breaks", Status.CRASHED, message=HOSTILE), row("p", "fixed", ms=1.0),
             row("p", "added", ms=1.0)]
    first = store(tmp_path, before)
    time.sleep(1.1)  # run ids have one-second resolution
    return first, store(tmp_path, after)


def test_compare_html_through_the_cli(tmp_path: Path) -> None:
    before, after = compared(tmp_path)
    result = CliRunner().invoke(app, ["compare", before.name, after.name, "--html", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    page = (after / f"compare-{before.name}.html").read_text()
    for change in ("same", "slower", "newly failing", "fixed", "new", "removed"):
        assert f'<span class="change {change.replace(" ", "-")}">{change}</span>' in page
    assert "correct → crashed" in page and HOSTILE not in page
    assert '<p id="suite">suite (' in page and "× after / before" in page  # the suite's line, both speedups


def test_compare_html_with_changes_only_lists_the_changed_rows_and_counts_the_rest(tmp_path: Path) -> None:
    before, after = compared(tmp_path)
    args = ["compare", before.name, after.name, "--html", "--results-dir", str(tmp_path)]
    every = CliRunner().invoke(app, args)
    assert every.exit_code == 0, every.output
    full = (after / f"compare-{before.name}.html").read_text()
    changed = CliRunner().invoke(app, [*args, "--changes-only"])
    assert changed.exit_code == 0, changed.output
    page = (after / f"compare-{before.name}.html").read_text()
    table = page.split('id="comparison"')[1].split("</table>")[0]
    assert full.split('id="comparison"')[1].split("</table>")[0].count('<span class="change same">same</span>') >= 1
    assert '<span class="change same">same</span>' not in table and "slower" in table
    assert 'id="left-out"' in page and 'id="left-out"' not in full


# --- the page in a browser --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:  # a Playwright Browser
    """One headless Chromium for the module (the system's: Playwright cannot download one offline)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CHROMIUM=/path/to/it)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:  # a Playwright Page
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.requests = []
    tab.on("request", lambda request: tab.requests.append(request.url))
    yield tab
    context.close()


def _open(page: Any, path: Path) -> None:
    """Open a page and wait until its script has put the problems' sections in (body[data-sections])."""
    page.goto(path.as_uri())
    page.wait_for_function("document.body.getAttribute('data-sections') !== null", timeout=30_000)
    assert page.evaluate("document.body.getAttribute('data-sections')") == "ready"


def _solutions(page: Any, table: str) -> list[str]:
    return page.eval_on_selector_all(f"{table} tbody tr", "rows => rows.map(r => r.dataset.solution)")


def test_the_leaderboard_sorts_when_a_header_is_clicked(report: Path, page: Any) -> None:
    _open(page, report)
    table = "section[data-problem='conv'] table.leaderboard"
    ranked = _solutions(page, table)
    assert ranked[:5] == ["fast", COMPILED, "slow", EAGER, "boom"]  # kbench.reports.leaderboard.ranked
    page.click(f"{table} th:has-text('median ms')")
    timed = {"cheat": 0.01, "fast": 1.0, COMPILED: 2.0, "slow": 3.0, EAGER: 4.0}
    assert _solutions(page, table)[:5] == sorted(timed, key=timed.get)
    assert set(_solutions(page, table)[5:]) == set(ranked) - set(timed)  # rows without a time stay last
    page.click(f"{table} th:has-text('median ms')")
    assert _solutions(page, table)[:5] == sorted(timed, key=timed.get, reverse=True)
    page.click(f"{table} th:has-text('solution')")
    assert _solutions(page, table) == sorted(ranked, key=str.lower)
    assert page.get_attribute(f"{table} th:has-text('solution')", "aria-sort") == "ascending"


def test_no_solution_text_runs_and_it_shows_literally(report: Path, page: Any) -> None:
    _open(page, report)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    # the report's script and its compressed sections (a data block, never run), nothing of a solution's
    assert page.evaluate("document.querySelectorAll('body script, body img').length") == 2
    assert page.evaluate("document.querySelectorAll('script:not([type])').length") == 1
    fast = page.locator("section.detail[data-problem='conv'][data-solution='fast'] ul.warnings li")
    assert fast.inner_text() == f"[monkey_patch] {HOSTILE}"
    boom = page.locator("section.detail[data-solution='boom'] pre.message")
    assert HOSTILE in boom.inner_text()
    log = page.locator("section.detail[data-solution='no_build'] pre.log")
    assert HOSTILE in log.text_content()
    assert all(url.startswith(("file:", "data:")) for url in page.requests), page.requests


def test_every_solution_has_its_detail_section_and_chart(report: Path, page: Any) -> None:
    _open(page, report)
    details = page.eval_on_selector_all("section.detail", "s => s.map(d => d.dataset.problem + '/' + d.dataset.solution)")
    expected = [f"conv/{e.solution}" for e in problem_rows()] + [f"gemm/{e.solution}" for e in problem_rows()[:4]]
    assert sorted(details) == sorted(expected)
    assert page.locator("svg.strips").count() == 2 and page.locator("svg.strips g.suspect").count() == 1
    anchor = page.get_attribute("section.detail[data-problem='conv'][data-solution='cheat']", "id")
    assert page.evaluate("document.querySelectorAll('details.card[open]').length") == 0  # every card folded
    page.click("section[data-problem='conv'] table.leaderboard a:has-text('cheat')")
    assert page.evaluate("location.hash") == f"#{anchor}"
    opened = page.eval_on_selector_all("details.card[open]", "c => c.map(d => d.closest('section').id)")
    assert opened == [anchor]  # the card a link leads to opens


def test_a_screenshot_is_not_blank_and_the_page_prints(report: Path, page: Any) -> None:
    image = pytest.importorskip("PIL.Image", reason="Pillow decodes the screenshot (it comes with matplotlib)")
    _open(page, report)
    shot = image.open(io.BytesIO(page.screenshot(full_page=False))).convert("RGB")
    colours = shot.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "the screenshot has almost no colours: a blank page?"
    assert max(count for count, _ in colours) < 0.95 * shot.width * shot.height
    assert page.pdf(format="A4")[:5] == b"%PDF-"


def test_the_fifty_problem_suite_loads_with_every_section(tmp_path: Path, page: Any) -> None:
    directory = store(tmp_path, suite(50))
    path = html.write_html_report(str(directory), tmp_path)
    start = time.perf_counter()
    _open(page, path)
    assert page.locator("section.detail").count() == 250 and page.locator("svg.strips").count() == 50
    assert time.perf_counter() - start < 20


def test_the_compare_page_in_the_browser(tmp_path: Path, page: Any) -> None:
    before, after = compared(tmp_path)
    comparison = Comparison(load(before), load(after), tuple(compare_runs(load(before), load(after), 0.01)), ())
    _open(page, html.write_html_compare(comparison))
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("svg.strips g.before").count() == 5 and page.locator("svg.strips g.slower").count() == 1
    page.click("#comparison th:has-text('after ms')")
    after_ms = page.eval_on_selector_all("#comparison tbody tr td:nth-child(7)", "c => c.map(x => x.dataset.v)")
    numbers = [float(v) for v in after_ms if v]
    assert numbers == sorted(numbers) and after_ms[len(numbers):] == [""] * (len(after_ms) - len(numbers))


# --- what to trust, on the first screen (issue 31) ----------------------------------------------------------------


def honest_copies(n: int = 20) -> list[Evaluation]:
    """Honest copies of the reference, 1.000-1.017x as the H100 measured them: noise, never a win."""
    rows = []
    for i in range(n):
        p = f"problem_{i:02d}"
        eager = samples(4.0, seed=100 + i, spread=0.01)
        copy = dataclasses.replace(samples(4.0 / (1 + 0.0009 * i), seed=200 + i, spread=0.01))
        rows += [row(p, EAGER, ms=4.0, speedup_vs_eager=1.0, speedup_vs_compile=None),
                 Evaluation(problem=p, solution="honest", status=Status.CORRECT, device="cuda", size="full",
                            timing=copy, eager_timing=eager, speedup_vs_eager=eager.median / copy.median)]
    return rows


def test_the_first_screen_says_what_to_trust(report: Path, page: Any) -> None:
    """A suspect row and a warning that weakens the fastest row are in the box above the fold, with the provenance."""
    _open(page, report)
    box = page.locator("#before-you-quote")
    assert box.is_visible() and box.bounding_box()["y"] < 900  # on the first screen of a 1280x900 window
    text = box.inner_text()
    assert "suspect conv / cheat" in text and "escaped_timer" in text
    header = page.locator("#provenance").inner_text()
    for key in ("kbench", "code", "device", "SM clock while timing", "timing", "precision", "tolerance", "sandbox"):
        assert key in header
    assert "NVIDIA H100 80GB HBM3" in header and "0123abc" in header


def test_a_dirty_tree_and_a_weakened_headline_are_marked(tmp_path: Path, page: Any) -> None:
    rows = problem_rows("conv")[:4]
    rows[2] = dataclasses.replace(rows[2], warnings=(Finding(FindingCode.GPU_THROTTLED, "the GPU was slowed by its power cap"),))
    directory = store(tmp_path, rows, git={"commit": "0123abc", "dirty": True})
    _open(page, html.write_html_report(str(directory), tmp_path))
    assert "dirty" in page.locator("#provenance td.dirty").inner_text()
    assert "weakened conv / fast" in page.locator("#before-you-quote").inner_text()
    assert page.locator("#problems td .dagger").count() == 1  # the headline "fast" is marked, not silent
    assert page.locator("section[data-problem='conv'] table.leaderboard .dagger").count() == 1


def test_honest_copies_read_about_one_and_count_for_nothing(tmp_path: Path, page: Any) -> None:
    directory = store(tmp_path, honest_copies(), config={**HEADER["config"], "compile_baseline": False})
    _open(page, html.write_html_report(str(directory), tmp_path))
    cells = page.eval_on_selector_all("table.leaderboard td.speedup", "c => c.map(x => x.innerText)")
    honest = [c for c in cells if c]
    assert len(honest) == 20 and all(c.startswith(("≈1", "~1.0", "~0.9")) for c in honest), honest
    significant = page.eval_on_selector_all("#fast-p-significant td", "c => c.map(x => x.innerText)")
    # fast_0, fast_0.5, fast_0.8 (not slower than p: honest copies are), fast_1, fast_1.5: no win counted
    assert significant[1:6] == ["100%", "100%", "100%", "0%", "0%"]
    assert "not measured" in page.locator("#compile-not-measured").inner_text()
    assert "torch.compile: not measured" in page.locator("#before-you-quote").inner_text()


def test_a_four_problem_run_prints_in_a_few_pages_per_problem(tmp_path: Path, page: Any) -> None:
    rows = [r for p in ("a", "b", "c", "d") for r in problem_rows(p)[:10]]
    directory = store(tmp_path, rows)
    _open(page, html.write_html_report(str(directory), tmp_path))
    pdf = page.pdf(format="A4")
    pages = pdf.count(b"/Type /Page") - pdf.count(b"/Type /Pages")
    assert 0 < pages <= 3 * 4 + 2, pages  # issue 31: 42 pages before, every detail card printed open


def kernelbench_suite(n: int = 250) -> list[Evaluation]:
    """A KernelBench-sized run as a level's honest copies give it: per problem an eager row and a solution row with the
    figures a real row carries (phases, trials at two sizes, accuracy, the protocol's figures, its GPU)."""
    trials = tuple(TrialResult(seed=43 + i, passed=True, max_abs_err=1e-6 * (i + 1), max_rel_err=1e-5, mismatched=0,
                               numel=1 << 20) for i in range(5))
    protocol = {"rounds": 40, "rechecked": 40, "recheck_every_call": True, "primed": False, "regime": "gpu",
                "eager_regime": "gpu", "refresh_s": 0.012, "recheck_s": 0.02, "calibration_p50_s": 4.1e-5,
                "verify_s": [2.1e-5 + i * 1e-7 for i in range(40)], "judged_issue_s": 3e-5, "judged_gpu_s": 1.2e-3,
                "regime_decision": {"issue_s": 3e-5, "gpu_s": 1.2e-3}}
    phases = {"setup": 0.3, "calibration": 0.45, "load": 0.05, "build": 0.03, "trials": 0.3, "other_sizes": 0.1,
              "timing": 0.5, "trust_determinism": 0.05, "trust_fp64": 0.2, "trust_profile": 0.2}
    rows = []
    for i in range(n):
        p = f"L{1 + i // 100}_{i % 100 + 1}_ConvTranspose3d_BatchNorm_Tanh_MaxPool_GroupNorm_Scaling"  # as long as theirs
        eager = samples(1.0 + i / n, n=40, seed=i)
        copy = samples((1.0 + i / n) * (1 + (i % 5 - 2) / 500), n=40, seed=1000 + i)
        rows += [with_figures(row(p, EAGER, ms=1.0 + i / n, speedup_vs_eager=1.0, speedup_vs_compile=None),
                              phases=phases, gpu=str(i % 4)),
                 with_figures(Evaluation(problem=p, solution="honest", status=Status.CORRECT, device="cuda",
                                         size="full", timing=copy, eager_timing=eager, trials=trials,
                                         size_checks={"small": trials[:2]},
                                         speedup_vs_eager=eager.median / copy.median,
                                         warnings=(Finding(FindingCode.NO_CUSTOM_KERNEL, "declares no kernel"),)),
                              phases=phases, gpu=str(i % 4), protocol=protocol,
                              accuracy={"solution": 2e-6, "reference": 1e-6, "tf32": 3e-4},
                              peak={"solution": 64 * 2**20, "reference": 64 * 2**20})]
    return rows


def mixed(rows: list[Evaluation]) -> list[Evaluation]:
    """The suite as a real one reads: every sixth solution suspect (processes that disagree), every seventh timed on a
    throttled GPU, every ninth problem's reference degenerate."""
    disagree = Finding(FindingCode.PROCESSES_DISAGREE, "[processes_disagree] the reference took 6.41 ms in the "
                                                       "candidate's process and 4.92 ms in the judge's")
    throttled = Finding(FindingCode.GPU_THROTTLED, "[gpu_throttled] the GPU was slowed while this was timed")
    zeros = Finding(FindingCode.DEGENERATE_ZEROS, "[degenerate_zeros] 51% of the outputs are exactly zero")
    out = []
    for i, e in enumerate(rows):
        n = i // 2
        if e.solution == EAGER and n % 9 == 0:
            e = dataclasses.replace(e, warnings=(*e.warnings, zeros))
        elif e.solution != EAGER and n % 6 == 0:
            e = dataclasses.replace(e, status=Status.SUSPECT, speedup_vs_eager=None, warnings=(*e.warnings, disagree),
                                    message=f"outputs pass, timing not trusted: {disagree.text}")
        elif e.solution != EAGER and n % 7 == 0:
            e = dataclasses.replace(e, warnings=(*e.warnings, throttled))
        out.append(e)
    return out


def test_a_250_problem_run_weighs_under_a_megabyte_and_its_first_screen_says_what_to_trust(tmp_path: Path,
                                                                                          page: Any) -> None:
    """Issue 41: the HTML of a 250-problem run under 1 MB, every section there once inflated, and at 1400x900 the first
    screen holds the provenance, the box of what weakens the numbers (42 suspect rows, 30 weakened, 28 degenerate
    problems: a line each, with counts), the status counts and fast_p with the geomean."""
    rows = mixed(kernelbench_suite(250))
    directory = store(tmp_path, rows, config={**HEADER["config"], "compile_baseline": False})
    path = html.write_html_report(str(directory), tmp_path)
    assert path.stat().st_size < 1_000_000, path.stat().st_size
    page.set_viewport_size({"width": 1400, "height": 900})
    _open(page, path)
    assert page.locator("section.problem").count() == 250 and page.locator("section.detail").count() == 500
    for selector in ("#provenance", "#before-you-quote", "#status-counts", "#fast-p-significant"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900, (selector, box)
    assert "250 solution row(s): 208 correct, 42 suspect" in page.locator("#status-counts").inner_text()
    box = page.locator("#before-you-quote")
    assert box.locator("li").count() == 4, box.inner_text()  # suspects, throttled, degenerate, torch.compile
    assert "suspect (42 rows)" in box.inner_text() and "weakened (30 rows)" in box.inner_text()
    assert "degenerate problems (28)" in box.inner_text()
    degenerate = box.locator("li.degenerate")  # five problems linked, and the sixth behind "and 23 more"
    assert "and 23 more" in degenerate.inner_text() and degenerate.locator("a").count() == 6
    assert all(degenerate.locator("a").nth(i).get_attribute("href").startswith("#p") for i in range(6))
    names = page.eval_on_selector_all("#problems tbody tr td:first-child", "c => c.map(x => x.dataset.v)")
    assert names[:3] == [rows[0].problem, rows[2].problem, rows[4].problem]  # by level and number: L1_1, L1_2, ...
    width = page.evaluate("[document.querySelector('#problems').scrollWidth, "
                          "document.querySelector('#problems').parentElement.clientWidth]")
    assert width[0] <= width[1], width  # the table fits its box: long names wrap, no column is cut off
    page.click(f"#problems a[href='#p249']")  # a link into the inflated sections still leads there
    assert page.evaluate("location.hash") == "#p249"


def test_the_samples_chart_draws_the_eager_each_speedup_divides() -> None:
    """Issue 41 item 5: the eager row may have run on another GPU at another time; under each solution the chart draws
    the judge's eager of that solution's own rounds, which its speedup divides."""
    eager_row = dataclasses.replace(row("conv", EAGER, ms=6.0, speedup_vs_eager=1.0), gpu="3")
    beside = samples(4.0, seed=11)
    solution = dataclasses.replace(row("conv", "fast", ms=1.0), gpu="1", eager_timing=beside)
    rows = html.chart_rows([eager_row, solution])
    assert [(label, kind) for label, kind, _ in rows] == [(EAGER, "reference"), ("fast", "correct"),
                                                           ("eager beside fast", "reference")]
    assert rows[2][2] == beside.samples and rows[0][2] == eager_row.timing.samples
    failed = row("conv", "wrong", Status.INCORRECT)
    assert [label for label, _, _ in html.chart_rows([failed])] == ["wrong"]  # nothing timed: no eager beside it
