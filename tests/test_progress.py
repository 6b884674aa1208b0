"""Progress: typed events, today's plain lines off a terminal, and the live display (bars, ETA, phase, tally) on one."""

import io
import json
import re

from rich.console import Console
from typer.testing import CliRunner

from kbench.cli import app, live
from kbench.cli.live import LiveProgress, terminal_console, wants_live
from kbench.commands.progress import (
    BuildFinished, BuildStarted, EvaluationFinished, EvaluationPhase, EvaluationStarted, Heartbeat, line, Note, plain,
    Planned,
)
from kbench.execution.listeners import listening, with_listener
from kbench.reports.tables import results_frame, to_terminal
from kbench.results.records import EAGER, Evaluation, Status
from kbench.results.storage import load_run
from tests.conftest import FIXTURES

runner = CliRunner()
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38;[0-9;]+)m")
SHOW_CURSOR = "\x1b[?25h"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _screen(sink: LiveProgress) -> str:
    """The display as it is drawn now, without escape codes."""
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    console.print(sink.render())
    return ANSI.sub("", console.file.getvalue())


def _row(screen: str, start: str) -> str:
    return next(text for text in screen.splitlines() if text.lstrip().startswith(start))


def test_the_plain_sink_writes_todays_lines_and_nothing_for_the_displays_own_events():
    events = [
        Note("probing the machine ..."),
        Planned(builds=2, evaluations=3),
        BuildStarted("p", "a"),
        BuildFinished("p", "a", "ok", True, "", 0.04, 1, 2),
        BuildFinished("p", "b", "ok", False, "", 12.34, 2, 3),
        BuildFinished("p", "c", "compile_error", False, "error: expected ';'", 3.0, 3, 3),
        EvaluationStarted("p", "reference (eager, torch.compile)"),
        EvaluationPhase("p", "reference (eager, torch.compile)", "timed"),
        Heartbeat("p: reference", 9.4),
        EvaluationFinished("p", "reference (eager, torch.compile)", (Status.CORRECT, Status.CORRECT), reference=True),
        EvaluationStarted("p", "b"),
        EvaluationFinished("p", "b", (Status.CORRECT,)),
        EvaluationFinished("p", "c", (Status.TIMEOUT,), "no result after 9 s"),
    ]
    lines: list[str] = []
    sink = plain(lines.append)
    for event in events:
        sink(event)
    assert lines == [
        "probing the machine ...",
        "  [build 1/2] p/a: cached (0.0 s)",
        "  [build 2/3] p/b: ok (12.3 s)",
        "  [build 3/3] p/c: compile_error: error: expected ';' (3.0 s)",
        "p: reference (eager, torch.compile) ...",
        "  ... p: reference: still running (9 s)",
        "p: b ...",
        "  p/b: correct",
        "  p/c: timeout - no result after 9 s",
    ]
    assert line(Planned(builds=1)) is None and line(EvaluationPhase("p", "b", "timed")) is None
    assert line(BuildStarted("p", "a")) is None


def test_the_live_display_shows_counts_eta_what_runs_and_a_tally():
    clock = Clock(100.0)
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    sink = LiveProgress(console, clock=clock, auto_refresh=False)
    with sink:
        sink(Planned(builds=2, evaluations=4))
        sink(BuildStarted("p", "a"))
        sink(BuildStarted("p", "b"))
        clock.now = 103.0
        screen = _screen(sink)
        assert "0/2" in _row(screen, "builds") and "p/a: building" in screen and "p/b: building" in screen
        clock.now = 104.0
        sink(BuildFinished("p", "a", "ok", False, "", 4.0, 1, 2))
        sink(BuildFinished("p", "b", "compile_error", False, "nvcc failed", 4.0, 2, 2))
        clock.now = 110.0  # the evaluations' clock starts here, not with the builds
        sink(EvaluationStarted("p", "reference (eager)"))
        clock.now = 120.0
        sink(EvaluationFinished("p", "reference (eager)", (Status.CORRECT,), reference=True))
        sink(EvaluationStarted("p", "a"))
        clock.now = 125.0
        sink(EvaluationPhase("p", "a", "timed"))
        clock.now = 130.0
        screen = _screen(sink)
        assert "2/2" in _row(screen, "builds (1 failed)") and "building" not in screen
        evaluations = _row(screen, "evaluations")
        assert "1/4" in evaluations and "0:00:20" in evaluations  # elapsed since the first evaluation
        assert "ETA 0:01:00" in evaluations  # 20 s for one, three left
        running = next(text for text in screen.splitlines() if "p/a:" in text)
        assert "p/a: timed, finishing" in running and "0:00:10" in running  # its own clock: started at 120
        assert _row(screen, "rows:") == "rows: correct 1"

        sink(EvaluationFinished("p", "a", (Status.INCORRECT,), "wrong values"))
        sink(EvaluationFinished("p", "b", (Status.COMPILE_ERROR,), "nvcc failed"))  # never started: no evaluation ran
        sink(EvaluationStarted("p", "c"))
        clock.now = 140.0
        screen = _screen(sink)
        assert "3/4" in _row(screen, "evaluations") and "ETA 0:00:10" in _row(screen, "evaluations")
        assert "p/a" not in screen and "p/c: evaluating" in screen
        assert _row(screen, "rows:") == "rows: correct 1 · incorrect 1 · compile_error 1"
    drawn = console.file.getvalue()
    assert drawn.rstrip("\n").endswith(SHOW_CURSOR)  # stopped: the cursor is back
    plain_text = ANSI.sub("", drawn)
    # Finished work is printed above the display, in the plain lines' words; the last frame stays.
    assert "  [build 2/2] p/b: compile_error: nvcc failed (4.0 s)" in plain_text
    assert "  p/a: incorrect - wrong values" in plain_text and "reference (eager): correct" not in plain_text
    last = plain_text[plain_text.rindex("builds"):]
    assert "3/4" in last and "p/c" not in last  # what was running when the display stopped is no longer shown


def test_a_phase_or_a_name_with_brackets_is_shown_as_text_not_markup():
    sink = LiveProgress(Console(file=io.StringIO(), force_terminal=True, width=120), clock=Clock(0.0), auto_refresh=False)
    sink(Planned(evaluations=1))
    sink(EvaluationStarted("p", "[bold]x"))
    sink(EvaluationPhase("p", "[bold]x", "[red]odd"))
    assert "p/[bold]x: [red]odd" in _screen(sink)


def test_the_display_is_live_only_on_a_terminal_that_can_redraw_unless_told():
    class Stream(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    assert wants_live(None, Stream(True), {"TERM": "xterm-256color"})
    assert not wants_live(None, Stream(False), {"TERM": "xterm-256color"})  # a pipe, CI, a file
    assert not wants_live(None, Stream(True), {"TERM": "dumb"})
    assert wants_live(True, Stream(False), {}) and not wants_live(False, Stream(True), {"TERM": "xterm"})


def test_no_color_draws_the_bars_without_colour(monkeypatch):
    def drawn() -> str:
        console = terminal_console(force=True)
        sink = LiveProgress(console, clock=Clock(0.0), auto_refresh=False)
        sink(Planned(evaluations=2))
        sink(EvaluationFinished("p", "s", (Status.INCORRECT,)))
        with console.capture() as captured:
            console.print(sink.render())
        return captured.get()

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert COLOUR.search(drawn())
    monkeypatch.setenv("NO_COLOR", "1")
    out = drawn()
    assert not COLOUR.search(out) and "1/2" in out and "incorrect 1" in out


def test_a_listener_set_around_a_launch_hears_its_events_and_cannot_break_the_reader():
    heard: list[str] = []
    own = heard.append
    assert with_listener(own) is own  # none set: the launcher's own callback alone

    def broken(name: str) -> None:
        raise RuntimeError("a display that fails")

    with listening(broken):
        both = with_listener(heard.append)
    both("timed")  # called later, from another thread in real use; the failure stays in the listener
    assert heard == ["timed"]
    seen: list[str] = []
    with listening(seen.append):
        with_listener(heard.append)("timed")
    assert seen == ["timed"] and heard == ["timed", "timed"]


def _fake_evaluations(monkeypatch, solution_result):
    """Evaluations that take no child: the eager row is correct; the solution's is `solution_result`'s."""
    from kbench.commands import evaluate_all

    def reference(plan, problem, slot=None):
        return [Evaluation(problem=problem.name, solution=EAGER, status=Status.CORRECT, device=plan.device,
                           size=plan.size, precision="fp32")]

    monkeypatch.setattr(evaluate_all, "evaluate_reference", reference)
    monkeypatch.setattr(evaluate_all, "evaluate_solution", solution_result)


def _invoke(tmp_path, *args: str):
    return runner.invoke(app, [
        "run", "-p", "tiny", "-s", "good", "--problems-dir", str(FIXTURES / "problems"),
        "--solutions-dir", str(FIXTURES / "solutions"), "--device", "cpu", "--no-compile-baseline",
        "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), *args,
    ])


def test_off_a_terminal_a_run_prints_todays_lines_no_escape_codes_and_the_table_on_stdout(tmp_path, monkeypatch):
    def solution(plan, problem, spec, built, gain, floor=None, slot=None):
        return Evaluation(problem=problem.name, solution=spec.name, status=Status.INCORRECT, message="fake",
                          device=plan.device, size=plan.size, precision="fp32")

    _fake_evaluations(monkeypatch, solution)
    result = _invoke(tmp_path)
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output
    (run_dir,) = (tmp_path / "results").iterdir()
    doc, rows = load_run(run_dir)
    assert result.stdout == f"{to_terminal(results_frame(rows))}\n\nresults: {run_dir}\n"
    cpu = doc["environment"]["cpu"]
    assert result.stderr.splitlines() == [
        "probing the machine ...",
        f"run {run_dir.name}: 1 problem(s) on cpu ({cpu}), size small",
        f"building 1 solution(s) into {tmp_path / 'cache'} ...",
        "  [build 1/1] tiny/good: ok (0.0 s)",
        "tiny: reference (eager) ...",
        "tiny: good ...",
        "  tiny/good: incorrect - fake",
        "1 of 2 row(s) not correct (incorrect): exit 1",
    ]
    # The live display goes to stderr only: stdout is the same table with it.
    forced = _invoke(tmp_path / "forced", "--progress")
    (forced_dir,) = (tmp_path / "forced" / "results").iterdir()
    assert forced.stdout == result.stdout.replace(str(run_dir), str(forced_dir))
    assert "\x1b[" in forced.stderr and "rows: correct 1 · incorrect 1" in ANSI.sub("", forced.stderr)


def test_ctrl_c_stops_the_live_display_and_leaves_an_interrupted_run(tmp_path, monkeypatch):
    shown: list[LiveProgress] = []

    class Recorded(LiveProgress):
        def __enter__(self) -> LiveProgress:
            shown.append(self)
            return super().__enter__()

    def solution(plan, problem, spec, built, gain, floor=None, slot=None):
        assert shown[0].live.is_started  # the display is up while the evaluation runs
        raise KeyboardInterrupt

    _fake_evaluations(monkeypatch, solution)
    monkeypatch.setattr(live, "LiveProgress", Recorded)
    result = _invoke(tmp_path, "--progress")
    assert result.exit_code == 130, result.output
    (sink,) = shown
    assert not sink.live.is_started and not sink.running.tasks  # stopped, nothing left spinning
    (run_dir,) = (tmp_path / "results").iterdir()
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["state"] == "interrupted" and [e["solution"] for e in doc["evaluations"]] == [EAGER]
    stderr = result.stderr
    # The display's last frame, then the cursor back, then the interrupt's message, readable.
    assert stderr.index(SHOW_CURSOR) < stderr.index("[error] Interrupted; 1 finished evaluation(s) are saved in")
    last = ANSI.sub("", stderr[:stderr.index(SHOW_CURSOR)])
    assert "1/2" in last[last.rindex("evaluations"):] and "rows: correct 1" in last
    assert result.stdout == ""  # no table for an interrupted run, as before
