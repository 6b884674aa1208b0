"""A run survives a solution that attacks it (README "Sandbox"): the run file says what was under way, and a resume
records it as crashed and finishes the rest."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.results.storage import run_state
from tests.conftest import FIXTURES, ROOT

CONTAINMENT = FIXTURES / "containment" / "tiny"
MARKER = "KBENCH_CONTAINMENT_VICTIM"


def _kbench(*args: str, cwd: Path, sandbox: str = "none") -> subprocess.CompletedProcess:
    """A `kbench run` in its own process, marked as the victim of the containment fixtures."""
    env = {**os.environ, MARKER: "1", "KBENCH_SANDBOX": sandbox,
           "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    return subprocess.run([sys.executable, "-m", "kbench", "run", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _marked_processes() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if f"{MARKER}=1".encode() in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
    return found


@pytest.fixture
def solutions(tmp_path: Path) -> Path:
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    for name in ("a_honest", "z_honest"):
        shutil.copy(FIXTURES / "solutions" / "tiny" / "good.py", folder / f"{name}.py")
    shutil.copy(CONTAINMENT / "kills_ancestors.py", folder / "kills_ancestors.py")
    return folder.parent


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_a_run_killed_by_a_solution_resumes_with_that_solution_crashed_and_finishes(tmp_path, solutions):
    results = tmp_path / "results"
    common = ["--results-dir", str(results), "--no-progress"]
    first = _kbench("-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(solutions),
                    "--device", "cpu", "--trials", "1", "--max-time", "0.2", *common, cwd=tmp_path)
    assert first.returncode == -9, (first.returncode, first.stderr[-2000:])  # no sandbox: the run is killed
    (run_dir,) = list(results.iterdir())
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["state"] == "running" and run_state(doc) == "incomplete"
    assert [x["solution"] for x in doc["in_flight"]] == ["kills_ancestors"]
    before = {e["solution"]: e for e in doc["evaluations"]}
    assert before["a_honest"]["status"] == "correct" and "z_honest" not in before

    second = _kbench("--resume", run_dir.name, *common, cwd=tmp_path)
    assert second.returncode == 1, second.stderr[-2000:]  # a crashed row: not every row is correct
    doc = json.loads((run_dir / "run.json").read_text())
    rows = {e["solution"]: e for e in doc["evaluations"]}
    assert doc["state"] == "complete" and "in_flight" not in doc
    assert rows["kills_ancestors"]["status"] == "crashed"
    assert "the run ended while this evaluation ran" in rows["kills_ancestors"]["message"]
    assert "--retry-crashed" in rows["kills_ancestors"]["message"]
    assert rows["z_honest"]["status"] == "correct" and rows["a_honest"] == before["a_honest"]  # kept as it was
    assert _marked_processes() == []


def test_retry_crashed_needs_a_run_to_resume(tmp_path):
    done = _kbench("-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--retry-crashed", "--no-progress",
                   cwd=tmp_path)
    assert done.returncode == 2 and "--resume" in done.stderr and done.stderr.count("[error]") == 1
