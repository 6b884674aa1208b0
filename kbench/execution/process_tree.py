"""Process trees of kbench's children: the live set, and killing a child with everything it started."""

from __future__ import annotations

import os
import signal
import threading

from kbench.system.procfs import descendants, processes

_live: set[int] = set()  # process groups of running children, killed if the parent is interrupted
_live_lock = threading.Lock()


def track(*groups: int) -> None:
    """Note running children's process groups: `kill_all` ends them if the run is interrupted."""
    with _live_lock:
        _live.update(groups)


def untrack(*groups: int) -> None:
    """Forget process groups that have ended."""
    with _live_lock:
        _live.difference_update(groups)


def tracked() -> frozenset[int]:
    """The process groups noted as running now."""
    with _live_lock:
        return frozenset(_live)


def kill_all() -> None:
    """Kill every running child with all it started (used when a run is interrupted)."""
    with _live_lock:
        groups = list(_live)
    for pgid in groups:
        kill_tree(pgid)


def _tree(root: int, exited: bool) -> set[int]:
    """`root`'s session and every descendant of the session's members (and of `root` unless it has exited)."""
    table = processes()
    found = {p.pid for p in table if p.sid == root} | (set() if exited else {root})
    found |= descendants(found, table)
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
