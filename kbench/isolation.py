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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG_TAIL_CHARS = 20_000
_live: set[int] = set()  # process groups of running children, killed if the parent is interrupted
_live_lock = threading.Lock()


def kill_all() -> None:
    """Kill every running child's process group (used when a run with parallel children is interrupted)."""
    with _live_lock:
        groups = list(_live)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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


def run_child(job: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> ChildOutcome:
    """Run `python -m kbench.worker` on `job`, in its own process group, killed after timeout_s.

    The child writes its result to a private pipe; stdout and stderr go to a log file kept as the
    evaluation's log. The whole process group is killed at the end, so no grandchild (a compiler, a
    thread-spawning solution) outlives the evaluation.
    """
    token = secrets.token_hex(16)
    read_fd, write_fd = os.pipe()
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(read_fd, chunks), daemon=True)
    reader.start()
    with tempfile.TemporaryFile() as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kbench.worker", "--result-fd", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            start_new_session=True,
            env=env,
        )
        os.close(write_fd)
        with _live_lock:
            _live.add(proc.pid)
        timed_out = False
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({**job, "token": token}).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        finally:
            _kill_group(proc)
            with _live_lock:
                _live.discard(proc.pid)
        proc.wait()
        seconds = time.monotonic() - start
        reader.join(timeout=5)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    result = None if timed_out else _parse(b"".join(chunks), token)
    return ChildOutcome(result, proc.returncode, timed_out, seconds, text[-LOG_TAIL_CHARS:])


def _drain(fd: int, chunks: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)


def worker_path_env() -> dict[str, str]:
    """Make sure the child can import kbench even when the parent runs from a source checkout."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
