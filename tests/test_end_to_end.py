"""A real problem end to end on the CPU: a real C++ extension compiled, validated, timed and cached."""

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.results.records import COMPILED, EAGER, Status
from kbench.results.storage import load_run
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

runner = CliRunner()


def _run(tmp_path, *args):
    result = runner.invoke(app, [
        "run", "--problem", "conv3d_logsumexp", "--device", "cpu", "--max-time", "1",
        "--problems-dir", str(ROOT / "problems"), "--solutions-dir", str(ROOT / "solutions"),
        "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), *args,
    ])
    assert result.exit_code == 0, result.output
    run_dir = sorted((tmp_path / "results").iterdir())[-1]
    return {e.solution: e for e in load_run(run_dir)[1]}


def test_conv3d_logsumexp_on_cpu_then_from_the_cache(tmp_path):
    rows = _run(tmp_path)
    assert rows[EAGER].status == Status.CORRECT and rows[EAGER].size == "small"
    assert rows[COMPILED].status == Status.CORRECT, rows[COMPILED].message
    cpu = rows["cpu_fused"]
    assert cpu.status == Status.CORRECT, cpu.message
    assert cpu.compile.ok and not cpu.compile.cached and cpu.compile.seconds > 1
    assert len(cpu.trials) == 5 and all(t.passed for t in cpu.trials)
    assert cpu.timing.median > 0 and cpu.speedup_vs_eager > 0
    cuda = rows["cuda_fused"]  # a first run without a GPU does not spend minutes compiling what cannot run here
    assert cuda.status == Status.NOT_RUN and cuda.compile is None
    assert "not compiled" in cuda.message and "kbench build" in cuda.message

    again = _run(tmp_path, "--solution", "cpu_fused", "--no-compile-baseline")
    assert again["cpu_fused"].status == Status.CORRECT
    assert again["cpu_fused"].compile.cached
    assert again["cpu_fused"].compile.seconds < cpu.compile.seconds
    assert COMPILED not in again
