"""What a newcomer sees: honest diagnoses, exit codes, and a first run on a GPU-less machine that is about what can
run there."""

import json

from typer.testing import CliRunner

from kbench.cli import app
from tests.conftest import FIXTURES

runner = CliRunner()
GOOD = (FIXTURES / "solutions" / "tiny" / "good.py").read_text()
CUDA_ONLY = '''import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline("never_built", cpp_sources="", cuda_sources="__global__ void k() {}", functions=[])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
'''


def _run(tmp_path, files: dict[str, str], *args: str):
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    result = runner.invoke(app, [
        "run", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(tmp_path / "solutions"),
        "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05", "--trials", "1",
        "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), *args,
    ])
    runs = sorted((tmp_path / "results").iterdir()) if (tmp_path / "results").exists() else []
    rows = {e["solution"]: e for e in json.loads((runs[-1] / "run.json").read_text())["evaluations"]} if runs else {}
    return result, rows


def test_a_file_without_modelnew_is_a_load_error_naming_it_whatever_its_devices(tmp_path):
    result, rows = _run(tmp_path, {"just_import": "import torch\n", "cuda_declared": 'DEVICES = ("cuda",)\nimport torch\n'})
    for name in ("just_import", "cuda_declared"):
        assert rows[name]["status"] == "load_error", rows[name]
        assert "defines no class ModelNew" in rows[name]["message"] and "add `class ModelNew" in rows[name]["message"]
    assert "ok (" not in result.output  # nothing was built, so no build says ok
    assert result.exit_code == 1


def test_a_syntax_error_is_a_load_error_with_its_line_and_never_an_ok_build(tmp_path):
    result, rows = _run(tmp_path, {"broken": GOOD.replace("def forward(self, x):", "def forward(self, x)")})
    assert rows["broken"]["status"] == "load_error"
    assert "SyntaxError" in rows["broken"]["message"] and "line 14" in rows["broken"]["message"]
    assert "broken: ok" not in result.output and "broken" not in "".join(
        line for line in result.output.splitlines() if "[build" in line)
    assert result.exit_code == 1 and "1 of 2 row(s) not correct (load_error): exit 1" in result.output


def test_a_run_exits_0_when_every_row_is_correct_or_cannot_run_here(tmp_path):
    result, rows = _run(tmp_path, {"good": GOOD, "cuda_only": CUDA_ONLY})
    assert rows["good"]["status"] == "correct" and rows["cuda_only"]["status"] == "not_run"
    assert result.exit_code == 0, result.output


def test_a_gpu_less_run_does_not_compile_cuda_solutions_and_says_so_in_one_line(tmp_path):
    result, rows = _run(tmp_path, {"cuda_only": CUDA_ONLY})
    row = rows["cuda_only"]
    assert row["status"] == "not_run" and row["compile"] is None  # nothing was compiled
    assert "kbench build" in row["message"] and "kbench gate" in row["message"]
    notes = [line for line in result.output.splitlines() if line.startswith("skipping")]
    assert notes == ["skipping 1 CUDA solution(s): no GPU here (`kbench build` or `kbench gate` compiles them without a GPU)"]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))


def test_a_usage_error_is_one_error_line_with_exit_2():
    import subprocess
    import sys

    from tests.conftest import ROOT

    for args in (["run", "--trials", "0"], ["nosuch"]):
        done = subprocess.run([sys.executable, "-m", "kbench", *args], capture_output=True, text=True, cwd=ROOT, check=False)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("[error] ") and "--help" in lines[0], done.stderr


def test_problems_are_found_from_a_folder_below_the_root_and_a_miss_says_what_to_do(tmp_path, monkeypatch):
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT / "kbench")
    listed = runner.invoke(app, ["list"])
    assert listed.exit_code == 0 and "conv3d_logsumexp" in listed.output and "cuda_fused" in listed.output
    assert max(len(line) for line in listed.output.splitlines()) <= 120  # long cells wrap
    monkeypatch.chdir(tmp_path)
    missed = runner.invoke(app, ["run", "-p", "conv3d_logsumexp"])
    assert missed.exit_code == 2 and "pass --problems-dir" in missed.output


def test_long_work_prints_a_line_at_least_every_heartbeat(tmp_path, monkeypatch):
    from kbench.commands import progress as progress_module

    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.5)
    slow = "import time\ntime.sleep(2.5)\n" + GOOD  # 2.5 s importing: the candidate's load
    result, rows = _run(tmp_path, {"slow": slow})
    assert rows["slow"]["status"] == "correct"
    beats = [line for line in result.output.splitlines() if line.startswith("  ... tiny: slow: still running")]
    assert len(beats) >= 3, result.output


def test_failing_rows_say_what_to_do_next(tmp_path):
    hangs = 'import time\nDEVICES = ("cpu",)\n' + GOOD.replace("def forward(self, x):", "def forward(self, x):\n        time.sleep(60)")
    raises = GOOD.replace("def forward(self, x):", "def forward(self, x):\n        raise ValueError('no')")
    result, rows = _run(tmp_path, {"hangs": hangs, "raises": raises}, "--timeout", "20")
    assert rows["hangs"]["status"] == "timeout" and "(next: raise --timeout (now 20 s)" in rows["hangs"]["message"]
    assert rows["raises"]["status"] == "runtime_error"
    assert "(next: rerun it alone with `kbench run -p tiny -s raises`)" in rows["raises"]["message"]
    assert result.exit_code == 1
