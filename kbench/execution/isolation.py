"""Run one job in a fresh child process with a timeout; every way it can end becomes an outcome."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbench.execution.zygote import ForkedWorker, Zygote, ZygoteError
from kbench.system.procfs import processes

LOG_TAIL_CHARS = 20_000
_live: set[int] = set()  # process groups of running children, killed if the parent is interrupted
_live_lock = threading.Lock()


def kill_all() -> None:
    """Kill every running child with all it started (used when a run is interrupted)."""
    with _live_lock:
        groups = list(_live)
    for pgid in groups:
        kill_tree(pgid)


def _tree(root: int, exited: bool) -> set[int]:
    """`root`'s session and every descendant of the session's members (and of `root` unless it has exited)."""
    table = processes()
    children: dict[int, list[int]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p.pid)
    found = {p.pid for p in table if p.sid == root}
    stack = list(found) + ([] if exited else [root])
    found.update(stack)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(os.getpid())
    return found


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(root: int, exited: bool = False, rounds: int = 5) -> None:
    """SIGKILL `root`'s process group, every process of its session and every descendant of any of them.

    A child of kbench is its own session, so its session holds whatever it started, even processes that moved to
    process groups of their own (ninja runs each compiler in one, so killing the group left compilers running); a
    descendant that started a session of its own is found through its parent. Everything found is stopped first
    (a stopped process cannot fork), the search repeated until it finds nothing new, then all are killed at once.
    Once `root` has `exited` (and been reaped) its number may belong to another process: then only its session's
    members, whose session keeps the number taken, and their descendants are."""
    stopped: set[int] = set()
    for _ in range(rounds):
        found = _tree(root, exited) - stopped
        if not found:
            break
        _signal_all(found, signal.SIGSTOP)
        stopped |= found
    if not exited:
        try:
            os.killpg(root, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _signal_all(stopped, signal.SIGKILL)


@dataclass(frozen=True)
class ChildOutcome:
    """What the parent saw: the child's result (if it reported one) or how it died, and its output."""

    result: dict[str, Any] | None
    returncode: int | None
    timed_out: bool
    seconds: float
    log: str

    @property
    def failure(self) -> tuple[str, str] | None:
        """(status, message) when the child gave no usable result; None when it did."""
        if self.timed_out:
            return "timeout", f"no result after {self.seconds:.0f} s; the child was killed"
        if self.result is not None:
            return None
        code = self.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return "crashed", f"the child was killed by {name}{_last_line(self.log)}"
        if code:
            return "crashed", f"the child exited with code {code} before reporting{_last_line(self.log)}"
        return "crashed", f"the child exited without reporting a result{_last_line(self.log)}"


def _last_line(log: str) -> str:
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return f" (last output: {lines[-1][:200]})" if lines else ""



def _kill_group(proc: subprocess.Popen[bytes] | ForkedWorker) -> None:
    """The child and all it started: a Popen is not reaped before this (its number stays its own); a forked worker is
    reaped by the zygote, so once it is known to have ended only its session is killed."""
    kill_tree(proc.pid, exited=isinstance(proc, ForkedWorker) and proc.returncode is not None)


def _parse(data: bytes, token: str) -> dict[str, Any] | None:
    """The one result line that carries this job's token. Lines without it (a solution writing to every
    descriptor it can find) are ignored; two lines with it mean the channel was tampered with: no result.
    """
    found = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.get("token") == token and isinstance(message.get("result"), dict):
            found.append(message["result"])
    return found[0] if len(found) == 1 else None


# Variables that differ between jobs of one run. A child started ahead of its job gets them with the job, so one
# started child serves any solution (the worker sets them before it loads anything).
JOB_ENV = ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "TRITON_CACHE_DIR", "TILELANG_CACHE_DIR",
           "CUTE_DSL_CACHE_DIR")


class _Child:
    """A started `python -m kbench.execution.worker`: it imports Python, torch and kbench, then waits for its job on stdin.

    The child writes its result to a private pipe; stdout and stderr go to a log file kept as the evaluation's log.
    It runs in its own process group, which is killed when the job ends, so no grandchild (a compiler, a
    thread-spawning solution) outlives the evaluation.
    """

    def __init__(self, env: dict[str, str] | None, warm: bool = False, zygote: Zygote | None = None) -> None:
        """Start `python -m kbench.execution.worker`, or have `zygote` fork one (kbench.execution.zygote): the same worker, imports done."""
        read_fd, write_fd = os.pipe()
        self.chunks: list[bytes] = []
        self.groups: list[int] = []  # further process groups the child reported (a judge's candidate)
        self.token = ""
        self.on_event: Callable[[str], Any] = lambda name: None
        self.reader = threading.Thread(target=_drain, args=(read_fd, self.chunks, self._event), daemon=True)
        self.reader.start()
        self.log = tempfile.TemporaryFile()
        try:
            self.proc = self._fork(zygote, write_fd, warm) if zygote is not None else self._spawn(env, write_fd, warm)
        except BaseException:
            self.log.close()
            raise
        finally:
            os.close(write_fd)  # the reader sees EOF if the child never started
        with _live_lock:
            _live.add(self.proc.pid)

    def _spawn(self, env: dict[str, str] | None, write_fd: int, warm: bool) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "kbench.execution.worker", "--result-fd", str(write_fd)] + (["--warm"] if warm else [])
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT,
                                pass_fds=(write_fd,), start_new_session=True, env=env)

    def _fork(self, zygote: Zygote, write_fd: int, warm: bool) -> ForkedWorker:
        stdin_r, stdin_w = os.pipe()
        try:
            pid = zygote.fork(stdin_r, self.log.fileno(), write_fd, warm)
        except BaseException:
            os.close(stdin_w)
            raise
        finally:
            os.close(stdin_r)
        return ForkedWorker(zygote, pid, os.fdopen(stdin_w, "wb"))

    def _event(self, line: bytes) -> None:
        """A progress line from the worker (`{"token", "event"}`, e.g. "timed" when its timing is over)."""
        if b'"event"' not in line or not self.token:
            return
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return
        if not isinstance(message, dict) or message.get("token") != self.token or not isinstance(message.get("event"), str):
            return
        if message["event"] == "group" and isinstance(message.get("pgid"), int) and message["pgid"] > 1:
            self._adopt(message["pgid"])  # the judge's candidate process: its own group, killed with this child
            return
        self.on_event(message["event"])

    def _adopt(self, pgid: int) -> None:
        with _live_lock:
            self.groups.append(pgid)
            _live.add(pgid)

    def run(self, job: dict[str, Any], timeout_s: float, on_event: Callable[[str], Any] | None = None) -> ChildOutcome:
        """Hand the child its job; wait at most timeout_s (counted from now) for it to end. on_event(name) is called
        (from a reader thread) for each progress event the worker reports."""
        token = self.token = secrets.token_hex(16)
        if on_event is not None:
            self.on_event = on_event
        start = time.monotonic()
        timed_out = False
        try:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({**job, "token": token}).encode())
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:
            self.discard()
        seconds = time.monotonic() - start
        self.reader.join(timeout=5)
        self.log.seek(0)
        text = self.log.read().decode("utf-8", "replace")
        self.log.close()
        result = None if timed_out else _parse(b"".join(self.chunks), token)
        return ChildOutcome(result, self.proc.returncode, timed_out, seconds, text[-LOG_TAIL_CHARS:])

    def discard(self) -> None:
        """Kill the child's process group, and any group it reported (a child still waiting for its job, or one whose
        job has ended)."""
        _kill_group(self.proc)
        with _live_lock:
            _live.discard(self.proc.pid)
            groups, self.groups = self.groups, []
            _live.difference_update(groups)
        for pgid in groups:
            kill_tree(pgid)
        self.proc.wait()


def run_child(job: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> ChildOutcome:
    """Run `python -m kbench.execution.worker` on `job` in a fresh child process, killed after timeout_s."""
    return _Child(env).run(job, timeout_s)


def run_forked(zygote: Zygote | None, job: dict[str, Any], timeout_s: float, env: dict[str, str]) -> ChildOutcome:
    """`run_child`, with the worker forked by `zygote` (started with `env`) while it is up; else started the slow
    way. The job's own variables (JOB_ENV) come with the job."""
    if zygote is not None and zygote.alive():
        try:
            child = _Child(env, zygote=zygote)
        except ZygoteError:
            pass
        else:
            return child.run({**job, "env": job_env(env)}, timeout_s)
    return run_child(job, timeout_s, env)


def shared_env(env: dict[str, str]) -> dict[str, str]:
    """What a zygote is started with: the environment without the per-job variables."""
    return {k: v for k, v in env.items() if k not in JOB_ENV}


def job_env(env: dict[str, str]) -> dict[str, str]:
    """The per-job variables, which travel with the job to a worker started before it."""
    return {k: env[k] for k in JOB_ENV if k in env}


class WarmStarts:
    """A launcher like `run_child` for a run's evaluations: each job gets a fresh worker, forked by a zygote that
    imported torch and kbench once for every worker with the same environment (kbench.execution.zygote).

    With `ahead` (CUDA runs) one worker is forked ahead for the next job as soon as the running job reports that its
    timing is over (or when the job ends, if it never times), so that it and its candidate create their CUDA contexts
    during the trust checks rather than during anybody's timing on this slot. On the CPU a worker is forked when its
    job comes (a spare's start-up would share the timed cores). If a zygote cannot start, workers start the slow way
    (`python -m kbench.execution.worker`).
    """

    def __init__(self, ahead: bool = True) -> None:
        self.ahead = ahead
        self._spares: dict[tuple[tuple[str, str], ...], _Child] = {}
        self._zygotes: dict[tuple[tuple[str, str], ...], Zygote | None] = {}
        self._lock = threading.Lock()
        self._closed = False

    def adopt(self, zygote: Zygote, env: dict[str, str]) -> None:
        """Use an already started zygote (the run's probe's) for the jobs whose shared environment is `env`; the
        launcher closes it with the others."""
        with self._lock:
            self._zygotes.setdefault(tuple(sorted(shared_env(env).items())), zygote)

    def _zygote(self, key: tuple[tuple[str, str], ...], env: dict[str, str]) -> Zygote | None:
        with self._lock:
            if key not in self._zygotes and not self._closed:
                self._zygotes[key] = Zygote(env)
            zygote = self._zygotes.get(key)
        return zygote if zygote is not None and zygote.alive() else None

    def _child(self, key: tuple[tuple[str, str], ...], env: dict[str, str]) -> _Child:
        zygote = self._zygote(key, env)
        if zygote is not None:
            try:
                return _Child(env, warm=self.ahead, zygote=zygote)
            except ZygoteError as exc:
                print(f"[warning] kbench's zygote failed ({exc}); workers start without it", file=sys.stderr)
                with self._lock:
                    self._zygotes[key] = None
                zygote.close()
        return _Child(env, warm=self.ahead)

    def _start_spare(self, key: tuple[tuple[str, str], ...], env: dict[str, str]) -> None:
        if not self.ahead:
            return
        with self._lock:
            if self._closed or key in self._spares:
                return
        child = self._child(key, env)
        with self._lock:
            if self._closed or key in self._spares:
                child.discard()
                return
            self._spares[key] = child

    def __call__(self, job: dict[str, Any], timeout_s: float, env: dict[str, str]) -> ChildOutcome:
        shared = shared_env(env)
        key = tuple(sorted(shared.items()))
        with self._lock:
            child = self._spares.pop(key, None)
        if child is None or child.proc.poll() is not None:  # none yet, or it died waiting
            if child is not None:
                child.discard()
            child = self._child(key, shared)
        job = {**job, "env": job_env(env)}
        outcome = child.run(job, timeout_s, on_event=lambda name: name == "timed" and self._start_spare(key, shared))
        self._start_spare(key, shared)  # the job ended without timing (a failure, a reference job)
        return outcome

    def waiting(self) -> int:
        """How many started children wait for a job."""
        with self._lock:
            return sum(child.proc.poll() is None for child in self._spares.values())

    def close(self) -> None:
        """Kill the children still waiting for a job, and the zygotes."""
        with self._lock:
            self._closed = True
            spares, self._spares = list(self._spares.values()), {}
            zygotes, self._zygotes = [z for z in self._zygotes.values() if z is not None], {}
        for child in spares:
            child.discard()
        for zygote in zygotes:
            zygote.close()


def _drain(fd: int, chunks: list[bytes], on_line: Callable[[bytes], Any]) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while line := pipe.readline():
            chunks.append(line)
            on_line(line)


def worker_path_env() -> dict[str, str]:
    """Make sure the child can import kbench even when the parent runs from a source checkout."""
    env = dict(os.environ)
    # Spinning OpenMP threads of the judge would steal cores from the candidate's timed calls (and the reverse):
    # idle threads sleep instead, in every child alike, unless the user chose otherwise.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
