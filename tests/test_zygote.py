"""Workers forked by the zygote: the same outcomes as workers started with subprocess, nothing inherited that a
solution could use, and a run that goes on when the zygote is gone."""

import dataclasses
import json
import os
import signal
import time

from kbench.execution import isolation, warm_starts
from tests.conftest import FIXTURES
from tests.test_warm_starts import _job

GOOD = FIXTURES / "solutions" / "tiny" / "good.py"
TINY = FIXTURES / "problems" / "tiny" / "model.py"

# Prepended to a correct solution: at import, in the candidate's process, it prints every descriptor it holds (to its
# log: the sandbox leaves it no file to write).
LISTS_FDS = '''import json, os, sys
_fds = {}
for _name in os.listdir("/proc/self/fd"):
    try:
        _fds[_name] = os.readlink(f"/proc/self/fd/{_name}")
    except OSError:
        pass
print("fds", json.dumps({"fds": _fds, "stdin": sys.stdin.read()}), flush=True)
'''


def _launcher(ahead=False):
    return warm_starts.WarmStarts(ahead=ahead)


def _problem_job(tmp_path, text):
    problem = tmp_path / "problem.py"
    problem.write_text(text + TINY.read_text())
    job = _job(GOOD)
    return dataclasses.replace(job, problem=dataclasses.replace(job.problem, path=str(problem)))


def test_forked_workers_give_fresh_processes_and_the_same_results_as_spawned_ones(tmp_path):
    solution = tmp_path / "pid.py"
    # A process that already loaded this solution is not fresh: the mark it left makes the next load fail. (In the
    # sandbox every candidate is PID 1 of a namespace of its own, and two started within one clock tick share a start
    # time: neither tells them apart.)
    solution.write_text('import builtins\nif getattr(builtins, "_kb_test_loaded_before", False):\n'
                        '    raise RuntimeError("this process already ran a job")\n'
                        'builtins._kb_test_loaded_before = True\nprint("pid loaded", flush=True)\n' + GOOD.read_text())
    env = isolation.worker_path_env()
    spawned = isolation.run_child(_job(solution), 60, env)
    warm = _launcher()
    try:
        forked = [warm(_job(solution), 60, env) for _ in range(3)]
    finally:
        warm.close()
    assert spawned.result.status == "correct"
    assert [o.result.status for o in forked] == ["correct"] * 3, [o.log for o in forked]
    assert {k for k, v in vars(forked[0].result.diagnostics).items() if v} == {
        k for k, v in vars(spawned.result.diagnostics).items() if v}
    assert forked[0].result.phases.keys() == spawned.result.phases.keys()
    # each loaded the solution (which fails in a process that ran a job before): a fresh process for every job
    assert [sum(line.startswith("pid ") for line in o.log.splitlines()) for o in forked] == [1, 1, 1]


def test_a_forked_candidate_holds_no_descriptor_of_its_worker(tmp_path):
    solution = tmp_path / "lists_fds.py"
    solution.write_text(LISTS_FDS + GOOD.read_text())
    warm = _launcher(ahead=True)  # the candidate forked before the job, as on CUDA
    try:
        outcome = warm(_job(solution), 60, isolation.worker_path_env())
    finally:
        warm.close()
    assert outcome.result.status == "correct", outcome.log
    seen = json.loads(next(line[4:] for line in outcome.log.splitlines() if line.startswith("fds ")))
    assert seen["stdin"] == ""  # not the worker's job pipe
    fds = seen["fds"]
    assert fds["0"] == "/dev/null"
    # stdout and stderr (the evaluation's log), the judge's socket, and what the listing itself opened: no pipe of
    # the worker's (its result pipe, its job pipe), no zygote socket
    others = {fd: target for fd, target in fds.items() if fd not in ("0", "1", "2")}
    assert sum(t.startswith("socket:") for t in others.values()) == 1, fds
    assert not any(t.startswith("pipe:") for t in others.values()), fds


def test_a_worker_killed_by_a_signal_is_reported_as_crashed(tmp_path):
    job = _problem_job(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)\n")
    warm = _launcher()
    try:
        outcome = warm(job, 60, isolation.worker_path_env())
    finally:
        warm.close()
    assert outcome.failure is not None and outcome.failure[0] == "crashed"
    assert "SIGABRT" in outcome.failure[1]


def test_a_worker_past_its_time_is_killed_with_its_group(tmp_path):
    job = _problem_job(tmp_path, "import os, subprocess, time\nprint('sleeper', subprocess.Popen(['sleep', '60']).pid, "
                                 "flush=True)\ntime.sleep(60)\n")
    warm = _launcher()
    start = time.monotonic()
    try:
        outcome = warm(job, 3, isolation.worker_path_env())
    finally:
        warm.close()
    assert outcome.timed_out and time.monotonic() - start < 30
    sleeper = int(next(line.split()[1] for line in outcome.log.splitlines() if line.startswith("sleeper")))
    time.sleep(0.2)
    try:
        os.kill(sleeper, 0)
        with open(f"/proc/{sleeper}/stat") as f:
            alive = f.read().split()[2] != "Z"
    except ProcessLookupError:
        alive = False
    assert not alive  # the worker's grandchild went with its process group


def test_the_run_goes_on_when_its_zygote_is_gone(tmp_path, capfd):
    env = isolation.worker_path_env()
    warm = _launcher()
    try:
        assert warm(_job(GOOD), 60, env).result.status == "correct"
        (zygote,) = [z for z in warm._zygotes.values() if z is not None]
        os.killpg(zygote.proc.pid, signal.SIGKILL)
        zygote.proc.wait()
        outcome = warm(_job(GOOD), 60, env)
    finally:
        warm.close()
    assert outcome.result is not None and outcome.result.status == "correct", outcome.log


def test_close_ends_the_zygote_and_the_spare(tmp_path):
    warm = _launcher(ahead=True)
    warm(_job(GOOD), 60, isolation.worker_path_env())
    zygotes = [z for z in warm._zygotes.values() if z is not None]
    spares = list(warm._spares.values())
    warm.close()
    assert zygotes and spares
    assert all(z.proc.poll() is not None for z in zygotes)
    assert all(child.proc.poll() is not None for child in spares)


def test_a_zygote_closed_with_a_worker_still_running_ends_it_at_once(tmp_path):
    """The zygote reaps its last children before it goes, but a worker still running when the parent closes it (or
    dies) is killed first, not waited for: closing takes moments, and nothing the worker holds outlives it."""
    from kbench.execution import child, zygote

    env = isolation.worker_path_env()
    owner = zygote.Zygote(child.zygote_env_of(env))
    worker = child.JobChild(env, zygote=owner)  # forked, waiting for a job that never comes
    assert worker.proc.poll() is None
    started = time.monotonic()
    owner.close()
    assert time.monotonic() - started < zygote.CLOSE_REAP_S / 2
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{worker.proc.pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{worker.proc.pid}")


def test_a_zygote_started_from_a_thread_that_ended_still_forks(tmp_path):
    """A run's builds start it from a pool thread; the thread's end must not end the zygote (PDEATHSIG would)."""
    import threading

    warm = _launcher()
    try:
        env = isolation.worker_path_env()
        first: list = []
        thread = threading.Thread(target=lambda: first.append(warm(_job(GOOD), 60, env)))
        thread.start()
        thread.join()
        time.sleep(0.5)
        (zygote,) = [z for z in warm._zygotes.values() if z is not None]
        assert zygote.alive()
        again = warm(_job(GOOD), 60, env)
    finally:
        warm.close()
    assert first[0].result.status == "correct" and again.result.status == "correct", again.log


def test_the_zygote_prepares_its_workers_without_asking_torch_about_cuda():
    """torch marks a process forked after any question about CUDA (importing torch.utils.cpp_extension asks one) as
    unable to use CUDA: every worker of a GPU run would fail. The zygote's preparation must ask none. (On a machine
    without a GPU torch still marks the fork, so this holds here too.)"""
    import subprocess
    import sys

    code = ("import os, torch\n"
            "from kbench.execution import zygote, worker\n"
            "zygote._prepare()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os._exit(3 if torch.cuda._is_in_bad_fork() else 0)\n"
            "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=isolation.worker_path_env())
    assert done.stdout.strip() == "0", done.stdout + done.stderr


# Run in a process of its own that reaps its descendants' orphans (a child subreaper): what the run leaves unreaped
# comes to it as zombies, as it comes to PID 1 on a machine whose init reaps nothing (the H100's left three).
LEAVES_NO_ZOMBIE = '''
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
from kbench.execution import isolation, warm_starts
from kbench.wire.jobs import ReferenceJob
from tests.conftest import FIXTURES
from tests.test_warm_starts import _job, _judging
warm = warm_starts.WarmStarts()
env = isolation.worker_path_env()
statuses = [warm(ReferenceJob(**_judging()), 60, env).result.status,
            warm(_job(FIXTURES / "solutions" / "tiny" / "good.py"), 60, env).result.status]
warm.close()
time.sleep(1)
zombies = []
for name in os.listdir("/proc"):
    try:
        rest = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        continue
    if rest[0] == "Z" and int(rest[1]) == os.getpid():
        zombies.append(int(name))
print([str(s) for s in statuses], zombies)
'''


def test_a_run_leaves_no_zombie_behind():
    """The zygote is the run's child subreaper: the candidates, namespaces and spares its workers leave when they end
    are reaped there, and at the end of a run it reaps its last children before it goes."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LEAVES_NO_ZOMBIE], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**isolation.worker_path_env(), "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip().splitlines()[-1] == "['correct', 'correct'] []", done.stdout + done.stderr[-2000:]
