"""One process per run that imports torch and kbench once and forks every job's worker from there.

`python -m kbench.execution.worker` spends seconds importing torch, kbench and the FLOP counter's machinery before it
can take a job, and its candidate (spawned) as many again. The zygote pays that once per run and environment: the
parent starts it (`Zygote`), then for each job hands it the job's stdin, log and result descriptors over a Unix
socket, and it forks a worker that has everything imported and no job yet. The zygote never touches a GPU and
never runs a job, so every worker still starts from the same clean state (a CUDA context does not survive a fork:
each worker, and its candidate, makes its own after the fork). Each worker is its own session and process group, as
a worker started with `subprocess` is, and the zygote reports how each one ended, so the parent sees the same
outcomes.

Nothing of a job reaches the zygote: it learns descriptors, two flags and where the worker is placed (PLACEMENT_ENV:
its GPU, set in the worker before CUDA starts there, and its slot's cores), never a job, a token or a path. So one
zygote, warmed once, serves every GPU of a run.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from kbench.results import codec
from kbench.system import cores, escapes
from kbench.system.lifetime import die_with_parent
from kbench.wire import jobs

START_TIMEOUT_S = 120.0  # the zygote's imports; a fork request waits this long for its first answer
CLOSE_REAP_S = 10.0  # at the end of a run, the zygote waits this long for its last children to end and reaps them
# Variables that place a worker (its GPU, its cores: kbench.system.cores): they differ between a run's slots, so a
# worker gets them with its fork, and sets them before it makes a CUDA context; everything else a zygote's workers
# share.
PLACEMENT_ENV = ("CUDA_VISIBLE_DEVICES", *cores.PLAN_ENV)  # the slot's GPU, its timing core and untimed cores


class ZygoteError(RuntimeError):
    """The zygote could not fork a worker (it died or never started); the caller starts one the slow way."""


class ForkedWorker:
    """A worker forked by the zygote, as kbench.execution.isolation uses a Popen: pid, stdin, poll(), wait()."""

    def __init__(self, zygote: Zygote, pid: int, stdin: Any) -> None:
        self.zygote, self.pid, self.stdin = zygote, pid, stdin

    @property
    def returncode(self) -> int | None:
        return self.zygote.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self.zygote.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return code


class Zygote:
    """The parent's handle on one zygote: fork requests in, fork and exit reports out (a reader thread)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.sock, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the zygote's log, open until close()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "kbench.execution.zygote",
                                          "--control-fd", str(child_end.fileno())],
                                         stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                         pass_fds=(child_end.fileno(),), start_new_session=True, env=env)
        finally:
            child_end.close()
        self._lock = threading.Lock()  # one fork request at a time
        self._changed = threading.Condition()
        self._forked: list[int] = []
        self._exits: dict[int, int] = {}
        self._dead = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._dead = True
                    self._changed.notify_all()
                    return
                message = json.loads(data)
                if "forked" in message:
                    self._forked.append(int(message["forked"]))
                else:
                    self._exits[int(message["exited"])] = int(message["code"])
                self._changed.notify_all()

    def fork(self, stdin_fd: int, log_fd: int, result_fd: int, warm: bool, candidate: bool = True,
             placement: dict[str, str] | None = None) -> int:
        """A new worker reading its job from stdin_fd, writing output to log_fd and its result to result_fd; started
        ahead (`warm`: its CUDA context made now), with a candidate process forked ahead for a solution's job
        (`candidate`), on the GPU `placement` names (PLACEMENT_ENV)."""
        request = {"warm": warm, "candidate": candidate,
                   "placement": {k: v for k, v in (placement or {}).items() if k in PLACEMENT_ENV}}
        with self._lock:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [stdin_fd, log_fd, result_fd])
            except OSError as exc:
                raise ZygoteError(f"the zygote is gone ({exc}){self._tail()}") from None
            with self._changed:
                if not self._changed.wait_for(lambda: self._forked or self._dead, START_TIMEOUT_S) or not self._forked:
                    raise ZygoteError(f"the zygote forked no worker{self._tail()}")
                return self._forked.pop(0)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            return -signal.SIGKILL if self._dead else None  # its workers die with it (PDEATHSIG)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._dead, timeout)
        return self.exit_code(pid)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._dead

    def _tail(self) -> str:
        self.log.seek(0)
        lines = [ln for ln in self.log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        return f": {lines[-1][:300]}" if lines else ""

    def close(self) -> None:
        """End the zygote: it reaps what its workers' trees left (up to CLOSE_REAP_S) and exits; then, or if it does
        not, it is killed (the workers it forked die with it)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # its end reads EOF
        except OSError:
            pass
        try:
            self.proc.wait(timeout=CLOSE_REAP_S + 1.0)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.sock.close()
        self.log.close()


# ---- the zygote's side ------------------------------------------------------------------------------------------

def _prepare() -> None:
    """What every worker would otherwise import (no GPU is touched)."""
    # heavy (torch) on purpose: only the zygote imports these, for its forks; the parent that starts it must not.
    # Nothing here may ask torch about CUDA: torch then marks every fork as unable to use CUDA (importing
    # torch.utils.cpp_extension does; candidates import it ahead of their job instead, candidate.preload).
    from kbench.execution import worker  # noqa: F401 - imported for the forks
    from kbench.judge import judge  # noqa: F401 - imported for the forks
    from kbench.judge.candidate import candidate, session  # noqa: F401 - imported for the forks

    codec.prepare(*jobs.WIRE_TYPES)  # each fork checks its job and result without building the checkers


def _warm() -> None:
    """The FLOP counter's set-up (seconds), done once the requests waiting at start are served: the run's first worker
    (its probe) need not wait for it; the reference's workers, which count FLOPs, get it from here."""
    from kbench.execution import worker  # heavy: torch, in the zygote only (see _prepare)

    worker.warm_flop_counter()


def _reap(sock: socket.socket, forked: set[int]) -> None:
    """Reap every ended child: the workers this zygote forked (their exits are reported) and, as the run's child
    subreaper, whatever a worker left behind when it ended (its candidate, the candidate's namespace), which would
    otherwise stay a zombie of PID 1 where PID 1 reaps nothing (a machine's bare init: three were left on the H100)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in forked:
            forked.discard(pid)
            sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _end_workers(forked: set[int]) -> None:
    """Kill every worker this zygote forked that has not ended (each is a session and group of its own): a parent
    that died leaves them running otherwise until the zygote goes; their candidates die with them (PDEATHSIG)."""
    for pid in forked:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _reap_all(deadline: float) -> None:
    """Reap children until none is left or the deadline passes (what ends later goes to this zygote's own reaper)."""
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.02)


def _become_worker(sock: socket.socket, wake: tuple[int, int], fds: list[int], request: codec.JsonObject,
                   started: int) -> None:
    """In the forked child: a session of its own (as a worker started with subprocess has), its placement, the job's
    descriptors instead of the zygote's, then one job (never returns). Closing `started` tells the zygote the session
    exists."""
    try:
        os.setsid()
        placement = request.get("placement") or {}
        os.environ.update({k: str(v) for k, v in placement.items() if k in PLACEMENT_ENV})
        os.close(started)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        die_with_parent()
        stdin_fd, log_fd, result_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(stdin_fd)
        os.close(log_fd)
        from kbench.execution import worker  # heavy: torch, imported by the zygote already (see _prepare)

        worker.serve(result_fd, bool(request.get("warm")), forked=True, candidate=bool(request.get("candidate", True)))
    finally:
        os._exit(70)


def main() -> None:
    parser = argparse.ArgumentParser(description="kbench zygote (internal): forks workers with kbench imported")
    parser.add_argument("--control-fd", type=int, required=True)
    args = parser.parse_args()
    # No PDEATHSIG here: it fires when the *thread* that started the zygote ends (a build pool's thread, say), not the
    # parent. The zygote ends when its socket reaches EOF, which the parent's death brings, and its workers with it.
    sock = socket.socket(fileno=args.control_fd)
    escapes.become_subreaper()  # the orphans of its workers' trees come here to be reaped (`_reap`)
    _prepare()
    wake = os.pipe()
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    warmed = False
    forked: set[int] = set()
    while True:
        watched: list[socket.socket | int] = [sock, wake[0]]
        ready, _, _ = select.select(watched, [], [], None if warmed else 0)
        if not ready and not warmed:
            _warm()
            warmed = True
            continue
        if wake[0] in ready:
            os.read(wake[0], 4096)
        _reap(sock, forked)
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, 4096, 3)
        if not data:  # the parent closed its end (or died): end its workers, reap what is left, then go
            _end_workers(forked)
            _reap_all(time.monotonic() + CLOSE_REAP_S)
            os._exit(0)
        sys.stdout.flush()
        sys.stderr.flush()
        started_r, started_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(started_r)
            _become_worker(sock, wake, fds, json.loads(data), started_w)
        os.close(started_w)
        os.read(started_r, 1)  # EOF once the worker has its own session (and so its own group): only then the reply
        os.close(started_r)
        for fd in fds:
            os.close(fd)
        forked.add(pid)
        sock.send(json.dumps({"forked": pid}).encode())


if __name__ == "__main__":
    main()
