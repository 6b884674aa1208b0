"""One started worker child: its launch (spawned or forked), its job, its result channel and its outcome."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kbench.execution import process_tree
from kbench.execution.listeners import with_listener
from kbench.execution.process_tree import kill_tree
from kbench.execution.timeline import Mark, no_mark
from kbench.execution.zygote import PLACEMENT_ENV, ForkedWorker, Zygote
from kbench.results.codec import JsonObject, ProtocolError, decode, encode
from kbench.results.records import Status
from kbench.system import shared_memory
from kbench.system.lifetime import exit_failure
from kbench.wire.jobs import Envelope, Job, JobResult, result_type

LOG_TAIL_CHARS = 20_000


@dataclass(frozen=True)
class ChildOutcome:
    """What the parent saw: the child's result (if it reported one) or how it died, and its output."""

    result: JobResult | None
    returncode: int | None
    timed_out: bool
    seconds: float
    log: str
    refused: str = ""  # why a result line with the job's token was not the record the job is answered with

    @property
    def failure(self) -> tuple[Status, str] | None:
        """(status, message) when the child gave no usable result; None when it did."""
        if self.timed_out:
            return Status.TIMEOUT, f"no result after {self.seconds:.0f} s; the child was killed"
        if self.result is not None:
            return None
        if self.refused:
            return Status.CRASHED, f"the child's result was refused: {self.refused}"
        if self.returncode:  # killed by a signal (negative) or exited with an error
            status, message = exit_failure(self.returncode, "the child", "before reporting")
            return status, message + _last_line(self.log)
        return Status.CRASHED, f"the child exited without reporting a result{_last_line(self.log)}"


R = TypeVar("R")


def answer(outcome: ChildOutcome, kind: type[R]) -> R:
    """The child's result, of the record type its job is answered with; when it gave none, a record of that type
    holding only how the child ended (`ChildOutcome.failure`): the one place an outcome becomes a status."""
    if outcome.failure is None and isinstance(outcome.result, kind):
        return outcome.result
    status, message = outcome.failure or (Status.CRASHED, "the child answered another job")
    return kind(status=status, message=message)  # type: ignore[call-arg]


def _last_line(log: str) -> str:
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return f" (last output: {lines[-1][:200]})" if lines else ""



def _kill_group(proc: subprocess.Popen[bytes] | ForkedWorker) -> None:
    """The child and all it started: a Popen is not reaped before this (its number stays its own); a forked worker is
    reaped by the zygote, so once it is known to have ended only its session is killed."""
    kill_tree(proc.pid, exited=isinstance(proc, ForkedWorker) and proc.returncode is not None)


def _parse(data: bytes, token: str) -> JsonObject | None:
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


def _checked(job: Job, raw: JsonObject | None) -> tuple[JobResult | None, str]:
    """The result record the job is answered with, checked field by field; or None and why it was refused."""
    if raw is None:
        return None, ""
    try:
        return decode(result_type(job), raw), ""
    except ProtocolError as exc:
        return None, str(exc)


# Variables that differ between jobs of one run. A child started ahead of its job gets them with the job, so one
# started child serves any solution (the worker sets them before it loads anything).
JOB_ENV = ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "TRITON_CACHE_DIR", "TILELANG_CACHE_DIR",
           "CUTE_DSL_CACHE_DIR")


class JobChild:
    """A started `python -m kbench.execution.worker`: it imports Python, torch and kbench, then waits for its job on
    stdin.

    The child writes its result to a private pipe; stdout and stderr go to a log file kept as the evaluation's log.
    It runs in its own process group, which is killed when the job ends, so no grandchild (a compiler, a
    thread-spawning solution) outlives the evaluation.
    """

    def __init__(self, env: dict[str, str] | None, warm: bool = False, zygote: Zygote | None = None,
                 candidate: bool = True) -> None:
        """Start `python -m kbench.execution.worker`, or have `zygote` fork one (kbench.execution.zygote): the same
        worker, imports done, placed on the GPU `env` names. Started ahead of its job (`warm`), it makes its CUDA
        context now, and a candidate process too unless its job is likely a reference's (`candidate` False)."""
        read_fd, write_fd = os.pipe()
        self.chunks: list[bytes] = []
        self.groups: list[int] = []  # further process groups the child reported (a judge's candidate)
        self._groups_lock = threading.Lock()
        self.token = ""
        self.on_event: Callable[[str], Any] = lambda name: None
        self.mark: Mark = no_mark  # the run's slot timeline (kbench.execution.timeline), set by its launcher
        self.candidate = candidate  # whether a candidate process was started ahead with it (a solution's job)
        self.answered = threading.Event()  # a line with a result came (the worker exits right after writing it)
        self.ended_before_turn = False  # it answered or ended while its turn had not come (run's `turn`)
        self.started_at = time.monotonic()  # the timeline's "started"
        self.reader = threading.Thread(target=_drain, args=(read_fd, self.chunks, self._event), daemon=True)
        self.reader.start()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the child's log, open until run() reads it
        try:
            self.proc = (self._fork(zygote, write_fd, warm, candidate, placement(env or {})) if zygote is not None
                         else self._spawn(env, write_fd, warm, candidate))
        except BaseException:
            self.log.close()
            raise
        finally:
            os.close(write_fd)  # the reader sees EOF if the child never started
        process_tree.track(self.proc.pid)

    def _spawn(self, env: dict[str, str] | None, write_fd: int, warm: bool, candidate: bool
               ) -> subprocess.Popen[bytes]:
        command = ([sys.executable, "-m", "kbench.execution.worker", "--result-fd", str(write_fd)]
                   + (["--warm"] if warm else []) + ([] if candidate else ["--no-candidate"]))
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT,
                                pass_fds=(write_fd,), start_new_session=True, env=env)

    def _fork(self, zygote: Zygote, write_fd: int, warm: bool, candidate: bool,
              where: dict[str, str]) -> ForkedWorker:
        stdin_r, stdin_w = os.pipe()
        try:
            pid = zygote.fork(stdin_r, self.log.fileno(), write_fd, warm, candidate, where)
        except BaseException:
            os.close(stdin_w)
            raise
        finally:
            os.close(stdin_r)
        return ForkedWorker(zygote, pid, os.fdopen(stdin_w, "wb"))

    def _event(self, line: bytes) -> None:
        """A progress line from the worker (`{"token", "event"}`, e.g. "timed" when its timing is over), or its result
        line (`answered`)."""
        if b'"result"' in line and self.token and self.token.encode() in line:
            self.answered.set()
            self.mark("answered")
            return
        if b'"event"' not in line or not self.token:
            return
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return
        if (not isinstance(message, dict) or message.get("token") != self.token
                or not isinstance(message.get("event"), str)):
            return
        if message["event"] == "ready" and isinstance(message.get("at"), float):
            self.mark("ready", message["at"])  # when the worker had made what it makes before a job (timeline)
            return
        if message["event"] == "group" and isinstance(message.get("pgid"), int) and message["pgid"] > 1:
            self._adopt(message["pgid"])  # the judge's candidate process: its own group, killed with this child
            return
        self.on_event(message["event"])

    def _adopt(self, pgid: int) -> None:
        with self._groups_lock:
            self.groups.append(pgid)
        process_tree.track(pgid)

    def run(self, job: Job, timeout_s: float, env: dict[str, str] | None = None,
            on_event: Callable[[str], Any] | None = None, turn: threading.Event | None = None,
            on_exit: Callable[[], Any] | None = None) -> ChildOutcome:
        """Hand the child its job (with `env`, the job's own variables, for a child started before it); wait at most
        timeout_s (counted from its turn) for it to end. on_event(name) is called (from a reader thread) for each
        progress event the worker reports.

        The job is the first line of the worker's stdin; the end of stdin is its turn to time on its GPU (the worker's
        wait_turn). With `turn` (the slot's previous job still finishing, kbench.execution.pool.Turn) stdin ends once
        `turn` is set, and the worker prepares what times nothing meanwhile; without, at once. `on_exit` is called
        once the worker and every group it reported have ended (which may come after this returns)."""
        token = self.token = secrets.token_hex(16)
        if on_event is not None:
            self.on_event = on_event
        start = time.monotonic()
        self.on_event = with_listener(self.on_event)  # and a listener set around this launch (a progress display)
        timed_out = False
        try:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(encode(Envelope(job, token, env or {})).encode() + b"\n")
                self.proc.stdin.flush()
                if turn is not None:
                    self._wait_turn(turn)
                self.proc.stdin.close()
                self.mark("turn")
            except BrokenPipeError:
                pass
            timed_out = not self._ended(timeout_s)
        finally:
            self.discard(reap_later=self.answered.is_set(), on_exit=on_exit)
        seconds = time.monotonic() - start
        if not self.answered.is_set():
            self.reader.join(timeout=5)  # what the worker wrote before it died
        self.log.seek(0)
        text = self.log.read().decode("utf-8", "replace")
        self.log.close()
        raw = None if timed_out else _parse(b"".join(self.chunks), token)
        result, refused = _checked(job, raw)
        return ChildOutcome(result, self.proc.returncode, timed_out, seconds, text[-LOG_TAIL_CHARS:], refused)

    def _wait_turn(self, turn: threading.Event) -> None:
        """Until `turn` is set, or the worker answered or ended before it needed its turn (a failed set-up:
        `ended_before_turn`)."""
        while not turn.wait(0.01):
            if self.answered.is_set() or self.proc.poll() is not None:
                self.ended_before_turn = True
                return

    def _ended(self, timeout_s: float) -> bool:
        """Wait until the worker has written its result or exited, at most timeout_s; False if neither came.

        The result is the worker's last word: it exits right after writing it, and its exit (its CUDA contexts torn
        down, tenths of a second) need not hold up the next job."""
        deadline = time.monotonic() + timeout_s
        while not self.answered.is_set():
            try:
                self.proc.wait(timeout=min(0.05, max(deadline - time.monotonic(), 0.0)))
                return True
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    return self.answered.is_set()
        return True

    def discard(self, reap_later: bool = False, on_exit: Callable[[], Any] | None = None) -> None:
        """Kill the child's process group, and any group it reported (a child still waiting for its job, or one whose
        job has ended); with `reap_later` (the worker has answered and is exiting) a thread of its own waits for the
        ends, so the caller goes on now. Then what they left in the machine's /dev/shm is swept
        (kbench.system.shared_memory); `on_exit` is called after."""
        with self._groups_lock:
            groups, self.groups = self.groups, []

        def end() -> None:
            try:
                _kill_group(self.proc)
                for pgid in groups:
                    kill_tree(pgid)
                self.proc.wait()
                self.mark("exited")
                process_tree.untrack(self.proc.pid, *groups)
                shared_memory.sweep()  # what its candidates left in the machine's /dev/shm, before the slot's next job
                self.mark("swept")
            finally:
                if on_exit is not None:
                    on_exit()

        if reap_later:
            threading.Thread(target=end, daemon=True).start()
        else:
            end()


def shared_env(env: dict[str, str]) -> dict[str, str]:
    """What a worker started ahead of its job is started with: the environment without the per-job variables."""
    return {k: v for k, v in env.items() if k not in JOB_ENV}


def zygote_env_of(env: dict[str, str]) -> dict[str, str]:
    """What a zygote is started with: the environment without the per-job variables or the placement (which its
    workers get with their fork: kbench.execution.zygote.PLACEMENT_ENV)."""
    return {k: v for k, v in shared_env(env).items() if k not in PLACEMENT_ENV}


def placement(env: dict[str, str]) -> dict[str, str]:
    """The variables that place a worker on its GPU (kbench.execution.zygote.PLACEMENT_ENV)."""
    return {k: env[k] for k in PLACEMENT_ENV if k in env}


def job_env(env: dict[str, str]) -> dict[str, str]:
    """The per-job variables, which travel with the job to a worker started before it."""
    return {k: env[k] for k in JOB_ENV if k in env}


def _drain(fd: int, chunks: list[bytes], on_line: Callable[[bytes], Any]) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while line := pipe.readline():
            chunks.append(line)
            on_line(line)
