"""Processes a solution started outside its frozen process group, and the CPU they took while it was timed.

The judge freezes the candidate's process group between requests (SIGSTOP), so the solution's code runs only
while its own call runs. A process the solution starts in a group or session of its own is not frozen: it could
keep cores (or the GPU) busy while the judge times the eager reference, and so buy a speedup. The judge is a child
subreaper (`become_subreaper`): what such a process leaves behind when its parent exits is re-parented to the
judge, not to init, so the whole tree stays in view. `escaped_cpu` sums, over a timed window, the CPU time of
every process of the candidate's tree that is not in its frozen group (the re-parented ones included) and of the
children the candidate reaped in the window (a finished helper's time lands there)."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from kbench.results.findings import Finding, FindingCode
from kbench.system.procfs import descendants, forks, processes, read, subtree

_PR_SET_CHILD_SUBREAPER = 36
ESCAPED_CPU_ABS_S = 0.05  # more CPU than this, and more than ESCAPED_CPU_REL of the window: the row is suspect
ESCAPED_CPU_REL = 0.02
GPU_DEVICE_PREFIX = "/dev/nvidia"  # a process with one of these open can queue GPU work (a CUDA context)


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); False where that is not possible."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class TreeCpu:
    """CPU seconds per escaped process, and the candidate's reaped children's, at one moment."""

    escaped: dict[int, float]
    reaped: float
    gpu: frozenset[int] = frozenset()  # escaped processes with a GPU device open


def own_helpers() -> set[int]:
    """The judge's own child processes that are not the solution's: multiprocessing's resource tracker, if running."""
    try:
        from multiprocessing import resource_tracker  # optional: a private helper, absent means none is running

        pid = getattr(resource_tracker._resource_tracker, "_pid", None)
    except (ImportError, AttributeError):
        return set()
    return {pid} if isinstance(pid, int) else set()


def opens(pid: int, prefix: str) -> bool:
    """Whether process `pid` has a file whose path starts with `prefix` open (False where /proc cannot tell)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            continue
    return False


def tree_cpu(candidate: int, group: int, judge: int | None = None, own: Iterable[int] = (),
             gpu_prefix: str = GPU_DEVICE_PREFIX) -> TreeCpu:
    """The candidate's escaped processes now: its descendants outside `group`, and the judge's other children
    (orphans re-parented to it) except the candidate and the judge's `own` helpers; with their CPU seconds, and
    which of them hold a GPU device (`gpu_prefix`)."""
    table = processes()
    by_pid = {p.pid: p for p in table}
    judge = os.getpid() if judge is None else judge
    skip = {candidate, *own}
    tree = descendants([candidate], table)
    for orphan in (p.pid for p in table if p.ppid == judge and p.pid not in skip):
        tree |= {orphan} | descendants([orphan], table)
    escaped = {pid: by_pid[pid].cpu_s for pid in tree if pid in by_pid and by_pid[pid].pgid != group}
    reaped = by_pid[candidate].children_cpu_s if candidate in by_pid else 0.0
    return TreeCpu(escaped, reaped, frozenset(pid for pid in escaped if opens(pid, gpu_prefix)))


def escaped_cpu(before: TreeCpu, after: TreeCpu) -> tuple[float, int]:
    """CPU seconds the escaped processes took between two readings, and how many took any."""
    taken = {pid: cpu - before.escaped.get(pid, 0.0) for pid, cpu in after.escaped.items()}
    busy = [t for t in taken.values() if t > 0]
    return sum(busy) + max(0.0, after.reaped - before.reaped), len(busy)


def escaped_warning(seconds: float, count: int, window_s: float, gpu_holders: int = 0) -> Finding | None:
    """`[escaped_process]` when processes outside the candidate's frozen group took CPU while it was timed, or held
    the GPU then (little CPU is enough to keep a GPU busy: one long kernel)."""
    if gpu_holders:
        return (Finding(FindingCode.ESCAPED_PROCESS, f"{gpu_holders} process(es) the solution started outside its "
                "frozen process group had the GPU open while it was timed (GPU work they queue runs while the "
                "reference is timed)"))
    if seconds <= max(ESCAPED_CPU_ABS_S, ESCAPED_CPU_REL * window_s):
        return None
    return (Finding(FindingCode.ESCAPED_PROCESS, f"{count or 'finished'} process(es) the solution started outside "
            f"its frozen process group took {seconds:.2f} s of CPU during the {window_s:.1f} s of timing (they ran "
            "while the reference was timed, which can make the solution look faster)"))


class Freezer:
    """What a candidate started outside its frozen process group (a session or group of its own), stopped whenever
    the group is (`stop`) and continued with it (`cont`): such a process runs only while the candidate answers a
    command, as the group's do, so nothing the solution started runs while the judge times the reference.

    `stop` first stops those it knows. It looks for new ones only when the machine's fork count (procfs.forks, one
    read) moved since it was read before the last look, or a process of the tree left the group without forking
    (setsid, then exec: each one's stat read); a look reads the candidate's tree (procfs.subtree) and repeats until
    nothing new turns up. A fork
    during a look moves the count past the one recorded, so the next `stop` looks again. A process re-parented to
    the judge (without the sandbox's PID namespace) is not below the candidate and is not stopped: the escaped-CPU
    count (`tree_cpu`) still sees it."""

    LOOKS = 5  # passes of a look, each stopping what the last found

    def __init__(self, candidate: int, group: int) -> None:
        self.candidate, self.group = candidate, group
        self.known: set[int] = set()  # below the candidate, outside its group: stopped with it
        self._tree: set[int] = set()  # every process below the candidate at the last look
        self._forks = -2  # no look yet

    def stop(self) -> None:
        self._send(signal.SIGSTOP)
        count = forks()
        if count >= 0 and count == self._forks and not self._left_group():
            return
        for _ in range(self.LOOKS):
            below = subtree(self.candidate)
            found = {p.pid for p in below if p.pgid != self.group}
            self._tree = {p.pid for p in below}
            self.known &= self._tree
            new = found - self.known
            if not new:
                break
            self.known |= new
            self._send(signal.SIGSTOP, new)
        self._forks = count  # read before the look: a fork since then makes the next stop look again

    def _left_group(self) -> bool:
        """Whether a process of the tree left the group without a fork (setsid or setpgid, then exec)."""
        for pid in self._tree - self.known:
            proc = read(pid)
            if proc is not None and proc.pgid != self.group:
                return True
        return False

    def cont(self) -> None:
        self._send(signal.SIGCONT)

    def _send(self, sig: int, pids: Iterable[int] | None = None) -> None:
        for pid in list(self.known if pids is None else pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                self.known.discard(pid)
            except PermissionError:
                pass


def kill_escaped(candidate: int, group: int) -> int:
    """After the candidate is gone: stop, kill and reap what it left outside its group (re-parented to this judge, the
    subreaper, or still below a survivor); how many were found."""
    found = set(tree_cpu(candidate, group, own=own_helpers()).escaped)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in found:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in found:
        try:
            os.waitpid(pid, os.WNOHANG)  # a re-parented child of this judge: leave no zombie
        except ChildProcessError:
            pass
    return len(found)
