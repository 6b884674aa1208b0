"""A run survives a solution that attacks it (docs/sandbox.md): the run file says what was under way, and a resume
records it as crashed and finishes the rest."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.results.storage import load_run, run_state
from tests.conftest import FIXTURES, ROOT

CONTAINMENT = FIXTURES / "containment" / "tiny"
MARKER = "KBENCH_CONTAINMENT_VICTIM"


def _kbench(*args: str, cwd: Path, sandbox: str = "none", **extra: str) -> subprocess.CompletedProcess:
    """A `kbench run` in its own process, marked as the victim of the containment fixtures."""
    env = {**os.environ, **extra, MARKER: "1", "KBENCH_SANDBOX": sandbox,
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
    doc, _ = load_run(run_dir)  # run.json and its journal, which holds what finished since run.json was written
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


def _sandbox_works() -> bool:
    """Whether this machine lets a process make the namespaces (root, or unprivileged user namespaces)."""
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--net", "true"],
                          capture_output=True) if shutil.which("unshare") else None
    return done is not None and done.returncode == 0


EVERY_CLASS = ("kills_ancestors", "signals_the_judge", "starts_a_daemon", "writes_results", "reads_other_solutions",
               "opens_a_socket")


@pytest.fixture
def listener():
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted(server) -> int:
    count = 0
    while True:
        try:
            server.accept()[0].close()
            count += 1
        except BlockingIOError:
            return count


def _every_class(tmp_path: Path) -> Path:
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    for name in EVERY_CLASS:
        shutil.copy(CONTAINMENT / f"{name}.py", folder / f"{name}.py")
    shutil.copy(FIXTURES / "solutions" / "tiny" / "good.py", folder / "z_honest.py")
    return folder.parent


def _earlier_run(results: Path) -> dict[Path, bytes]:
    earlier = results / "20200101-000000-aaaa"
    earlier.mkdir(parents=True)
    (earlier / "run.json").write_text('{"format": "kbench-run", "a": "run of another day"}\n')
    (earlier / "results.csv").write_text("problem,solution\n")
    return {p: p.read_bytes() for p in earlier.iterdir()}


@pytest.mark.skipif(not _sandbox_works(), reason="this machine allows no PID, mount and network namespaces")
def test_in_the_sandbox_every_attack_class_is_contained_and_the_run_completes(tmp_path, listener):
    results = tmp_path / "results"
    before = _earlier_run(results)
    os.environ["KBENCH_CONTAINMENT_PORT"] = str(listener.getsockname()[1])
    try:
        done = _kbench("-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir",
                       str(_every_class(tmp_path)), "--device", "cpu", "--trials", "1", "--max-time", "0.2",
                       "--results-dir", str(results), "--no-progress", cwd=tmp_path, sandbox="on")
    finally:
        del os.environ["KBENCH_CONTAINMENT_PORT"]
    run = next(p for p in results.iterdir() if p.name != "20200101-000000-aaaa")
    doc = json.loads((run / "run.json").read_text())
    rows = {e["solution"]: e for e in doc["evaluations"]}
    assert done.returncode == 0 and doc["state"] == "complete", (done.returncode, done.stderr[-3000:])
    for name in (*EVERY_CLASS, "z_honest"):
        assert rows[name]["status"] == "correct", (name, rows[name]["message"])
        assert rows[name]["diagnostics"]["sandbox"] == "namespaces", name
    assert {p: p.read_bytes() for p in before} == before and not list(results.rglob("planted.txt"))
    assert _accepted(listener) == 0
    assert _marked_processes() == [] and not _daemons()


def test_without_the_sandbox_the_judge_still_decides_and_the_run_completes(tmp_path, listener):
    """The classes that do not end the run: reading another solution and the network reach their goal, and the
    verdict says so; killing the judge costs one evaluation; the daemon is found and ended."""
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    for name in ("signals_the_judge", "starts_a_daemon", "reads_other_solutions", "opens_a_socket"):
        shutil.copy(CONTAINMENT / f"{name}.py", folder / f"{name}.py")
    shutil.copy(FIXTURES / "solutions" / "tiny" / "good.py", folder / "z_honest.py")
    os.environ["KBENCH_CONTAINMENT_PORT"] = str(listener.getsockname()[1])
    try:
        done = _kbench("-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir",
                       str(folder.parent), "--device", "cpu", "--trials", "1", "--max-time", "0.2", "--results-dir",
                       str(tmp_path / "results"), "--no-progress", cwd=tmp_path)
    finally:
        del os.environ["KBENCH_CONTAINMENT_PORT"]
    (run,) = list((tmp_path / "results").iterdir())
    doc = json.loads((run / "run.json").read_text())
    rows = {e["solution"]: e for e in doc["evaluations"]}
    assert doc["state"] == "complete", done.stderr[-3000:]
    assert rows["reads_other_solutions"]["status"] == "load_error"
    assert rows["opens_a_socket"]["status"] == "load_error" and _accepted(listener) >= 1
    assert rows["signals_the_judge"]["status"] == "crashed"
    assert rows["z_honest"]["status"] == "correct" and rows["z_honest"]["diagnostics"]["sandbox"] == "none"
    assert not _daemons()


def _daemons() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if b"KBENCH_CONTAINMENT_DAEMON=1" in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
    return found


def _markers(*roots: Path, depth: int = 6) -> list[Path]:
    found = []
    for root in roots:
        for folder, subfolders, files in os.walk(root):
            if len(Path(folder).parts) - len(root.parts) >= depth:
                subfolders.clear()
            found += [Path(folder) / f for f in files if f.startswith("kbench_marker_")]
    return found


MARKER_KEY = 0x6B424D4B  # leaves_markers.py's System V key


def _segment() -> int:
    """The id of leaves_markers.py's System V shared memory segment on this machine, -1 when there is none."""
    return ctypes.CDLL(None).shmget(MARKER_KEY, 0, 0)


@pytest.fixture
def no_segment_left():
    """A segment left by a failed run of the test below is removed, so that it does not fail the next run."""
    yield
    if (segment := _segment()) != -1:
        ctypes.CDLL(None).shmctl(segment, 0, None)  # IPC_RMID


@pytest.mark.skipif(not _sandbox_works(), reason="this machine allows no PID, mount and network namespaces")
def test_in_the_sandbox_nothing_a_solution_writes_outlives_its_evaluation(tmp_path, no_segment_left):
    """A solution that leaves marker files wherever it can (its home and caches, its build folder and kernel DSL
    caches, the temporary folders, /dev and /dev/shm, the results, problems and solutions folders) and a System V
    shared memory segment is correct and leaves none: a solution evaluated after it finds none, and none is on the
    machine when the run ends."""
    problems = tmp_path / "problems"
    shutil.copytree(FIXTURES / "problems" / "tiny", problems / "tiny")
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    shutil.copy(CONTAINMENT / "leaves_markers.py", folder / "a_leaves_markers.py")
    shutil.copy(CONTAINMENT / "reads_markers.py", folder / "z_reads_markers.py")
    home, results = tmp_path / "home", tmp_path / "results"
    (home / ".cache").mkdir(parents=True)
    done = _kbench("-p", "tiny", "--problems-dir", str(problems), "--solutions-dir", str(folder.parent), "--device",
                   "cpu", "--trials", "1", "--max-time", "0.2", "--results-dir", str(results), "--no-progress",
                   "--jobs", "1", cwd=tmp_path, sandbox="on", HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    (run,) = list(results.iterdir())
    rows = {e["solution"]: e for e in json.loads((run / "run.json").read_text())["evaluations"]}
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    for name in ("a_leaves_markers", "z_reads_markers"):
        assert rows[name]["status"] == "correct", (name, rows[name]["message"])
        assert rows[name]["diagnostics"]["sandbox"] == "namespaces", name
    assert _markers(tmp_path, Path("/dev"), Path("/var/tmp")) == []
    assert _markers(Path("/tmp"), depth=3) == []
    assert _segment() == -1, "a System V shared memory segment outlived the solution that made it"


def test_what_a_solution_leaves_in_the_machines_dev_shm_is_gone_before_the_next_one(tmp_path):
    """Where the candidate's /dev/shm is the machine's (on CUDA; here the sandbox is off so that it is on the CPU too),
    the files and folders it made there are swept once its worker has exited: the next solution finds none, and
    none is there when the run ends (kbench.system.shared_memory)."""
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    shutil.copy(CONTAINMENT / "leaves_shm.py", folder / "a_leaves_shm.py")
    shutil.copy(CONTAINMENT / "reads_markers.py", folder / "z_reads_markers.py")
    results = tmp_path / "results"
    done = _kbench("-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(folder.parent),
                   "--device", "cpu", "--trials", "1", "--max-time", "0.2", "--results-dir", str(results),
                   "--no-progress", "--jobs", "1", cwd=tmp_path)
    (run,) = list(results.iterdir())
    rows = {e["solution"]: e for e in json.loads((run / "run.json").read_text())["evaluations"]}
    try:
        assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
        for name in ("a_leaves_shm", "z_reads_markers"):
            assert rows[name]["status"] == "correct", (name, rows[name]["message"])
            assert rows[name]["diagnostics"]["sandbox"] == "none", name
        assert _markers(Path("/dev/shm")) == []
    finally:
        for left in Path("/dev/shm").glob("kbench_marker_shm_*"):
            shutil.rmtree(left) if left.is_dir() else left.unlink()
