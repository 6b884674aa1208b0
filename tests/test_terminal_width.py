"""Tables for a terminal: `kbench list` never splits a name; `kbench run`'s table keeps within 120 columns."""

import re
import shutil
from collections import Counter

import pytest
from typer.testing import CliRunner

from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.cli import app
from kbench.reports.tables import row_order, run_table, results_frame, to_markdown, to_terminal
from kbench.results.records import COMPILED, EAGER, Evaluation, Measurement, Status
from tests.conftest import FIXTURES, ROOT

runner = CliRunner()
PROBLEMS = sorted(p.name for p in (ROOT / "problems").iterdir() if (p / "model.py").exists())
# Every (problem, solution) the listing shows: each name is a word of a line as many times as it is listed.
NAMES = Counter(PROBLEMS) + Counter(f.stem for p in PROBLEMS for f in (ROOT / "solutions" / p).glob("*.py"))


def _list(columns: int, *args: str) -> list[str]:
    result = runner.invoke(app, ["list", *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _whole(lines: list[str]) -> None:
    """Each name, whole, as often as it is listed: a name split over two lines (`convtranspose3d_layernor`, `m`)
    would be missing once."""
    words = Counter(w for line in lines for w in re.findall(r"[\w.]+", line))
    assert {n: words[n] for n in NAMES} == dict(NAMES)


def test_the_shipped_problems_fit_120_columns():
    lines = _list(120)
    assert max(map(len, lines)) <= 120
    _whole(lines)


@pytest.mark.parametrize("columns", [80, 100, 120, 200])
def test_no_problem_or_solution_name_is_split_at_any_width(columns):
    lines = _list(columns)
    _whole(lines)
    assert max(map(len, lines)) <= columns


def test_a_narrow_terminal_gets_one_block_per_problem():
    lines = _list(80)
    assert max(map(len, lines)) <= 80
    for name in PROBLEMS:
        assert name in lines  # the block's first line: the name alone
    assert "cuda_fused (cuda; fp32)" in "\n".join(lines)


def test_long_kernelbench_names_stay_whole(tmp_path):
    long = "34_ConvTranspose3d_LayerNorm_GELU_Scaling_And_A_Long_Tail"
    (tmp_path / "p" / long).mkdir(parents=True)
    for f in ("model.py", "problem.toml"):
        shutil.copy(FIXTURES / "problems" / "tiny" / f, tmp_path / "p" / long / f)
    (tmp_path / "s" / long).mkdir(parents=True)
    shutil.copy(FIXTURES / "solutions" / "tiny" / "good.py", tmp_path / "s" / long / "a_solution_with_a_long_name.py")
    for columns in (60, 80, 120):
        lines = _list(columns, "--problems-dir", str(tmp_path / "p"), "--solutions-dir", str(tmp_path / "s"))
        assert any(long in line for line in lines) and any("a_solution_with_a_long_name" in line for line in lines)
        assert max(map(len, lines)) <= columns


# ---- the run table ----------------------------------------------------------------------------------------------

LAUNCH = ("[launch_bound] the host takes 0.93 of the device time to issue each call (Python, the dispatcher and the "
          "driver), so the timing measures the launch path rather than the kernels; fuse the work or capture a CUDA "
          "graph before it is timed")
OTHERS = ("[implausible_speed] 41x faster than eager: check that it computes the whole output",
          ("[state_changed] the solution changed process-wide settings: torch.backends.cudnn.allow_tf32 True -> "
           "False; torch.backends.cuda.matmul.allow_tf32 True -> False (restored before each call)"))


def _rows():
    timing = Measurement((0.0021, 0.0022, 0.0023) * 50)
    common = {"device": "cuda", "size": "full", "timing": timing, "eager_timing": timing}
    return [
        Evaluation(problem="convtranspose3d_layernorm", solution=EAGER, status=Status.CORRECT, speedup_vs_eager=1.0,
                   **common),
        Evaluation(problem="convtranspose3d_layernorm", solution=COMPILED, status=Status.CORRECT,
                   speedup_vs_eager=2.0, speedup_vs_compile=1.0, warnings=(from_legacy(LAUNCH),), **common),
        Evaluation(problem="convtranspose3d_layernorm", solution="tf32_igemm_with_a_longer_name",
                   status=Status.CORRECT, speedup_vs_eager=8.6, speedup_vs_compile=2.2, warnings=tuple(map(from_legacy, (LAUNCH, *OTHERS))),
                   percent_of_floor=33.0, **common),
        Evaluation(problem="conv3d_gelu", solution="cuda_fused", status=Status.RUNTIME_ERROR, device="cuda",
                   size="full", message="the solution raised RuntimeError: CUDA error: an illegal memory access\n"
                                        "CUDA kernel errors might be asynchronously reported at some other API call",
                   warnings=(from_legacy(OTHERS[0]),)),
    ]


def _footnotes(text):
    """The footnotes under the table, each unwrapped into one line."""
    notes = []
    for line in text.split("\n\n", 1)[1].splitlines():
        if line.startswith("["):
            notes.append(line)
        else:
            notes[-1] += " " + line.strip()
    return notes


def test_the_run_table_keeps_within_120_columns_and_every_warning_in_a_footnote():
    rows = _rows()
    text = to_terminal(run_table(rows))
    assert max(map(len, text.splitlines())) <= 120, text
    notes = _footnotes(text)
    shown = sorted(rows, key=row_order)  # problems by name and number, then eager, torch.compile, the solutions
    assert [e.solution for e in shown] == ["cuda_fused", EAGER, COMPILED, "tf32_igemm_with_a_longer_name"]
    expected = [f"{e.problem}/{e.solution}: {' '.join(part.split())}" for e in shown
                for part in (e.message, *(w.text for w in e.warnings)) if part]
    assert [n.split("] ", 1)[1] for n in notes] == expected  # each in full, numbered in order, correct rows too
    assert [n.split("]")[0] for n in notes] == [f"[{i}" for i in range(1, len(expected) + 1)]
    assert "..." not in text
    table = {line.split()[1]: line for line in text.split("\n\n")[0].splitlines() if line.startswith("conv")}
    assert table["cuda_fused"].endswith("  1, 2") and table[COMPILED].endswith("  3")
    assert table["tf32_igemm_with_a_longer_name"].endswith("  4, 5, 6") and table[EAGER].endswith("%")  # numbers


def test_csv_and_markdown_keep_every_note_in_full():
    rows = _rows()
    frame = results_frame(rows)
    csv, markdown = frame.to_csv(index=False), to_markdown(frame)
    for e in rows:
        for part in (w.text for w in e.warnings):
            assert part in csv and part in markdown
    assert "illegal memory access CUDA kernel errors" in csv  # the message's lines, joined on one
    assert len(csv.splitlines()) == len(rows) + 1  # one line per row


def test_a_table_that_cannot_fit_leaves_out_columns_and_says_which():
    rows = _rows()
    text = to_terminal(results_frame(rows), width=90)
    assert max(map(len, text.splitlines())) <= 90
    said = " ".join(text.split())
    assert "left out for width: n, eager_ms" in said and "(results.csv has every column)" in said
    assert "convtranspose3d_layernorm" in text and "tf32_igemm_with_a_longer_name" in text
