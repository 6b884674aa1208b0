"""The processes Linux shows in /proc, read without any library: who started whom, sessions, CPU time."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Process(NamedTuple):
    pid: int
    ppid: int
    sid: int  # session id
    cpu_s: float  # user and system CPU seconds so far
    pgid: int = 0  # process group
    children_cpu_s: float = 0.0  # the CPU seconds of its children that it has reaped (waited for)


def processes() -> list[Process]:
    """Every process this user can see (empty where there is no /proc)."""
    found: list[Process] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        if (proc := read(int(name))) is not None:
            found.append(proc)
    return found


def read(pid: int) -> Process | None:
    """Process `pid` from its /proc/PID/stat; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, session, ...
    return Process(pid, int(fields[1]), int(fields[3]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
                   int(fields[2]), (int(fields[13]) + int(fields[14])) / CLOCK_TICKS)


def descendants(roots: Iterable[int], table: Iterable[Process]) -> set[int]:
    """Every process of `table` below one of `roots`: their children, the children's children, and so on (a root
    itself only where it is below another root)."""
    children: dict[int, list[int]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p.pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def forks() -> int:
    """Processes created on this machine since boot (/proc/stat's `processes`): when it has not moved, no process has
    started anywhere. -1 where it cannot be read."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"processes "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def subtree(root: int) -> list[Process]:
    """`root`'s descendants: read from each process's `task/*/children` where the kernel lists children (a few files;
    CONFIG_PROC_CHILDREN), else from a scan of /proc (one file per process on the machine, about 20 us each)."""
    found: list[Process] = []
    todo, seen = [root], {root}
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                if pid == root and not found:  # no children lists on this kernel
                    table = processes()
                    below = descendants([root], table)
                    return [p for p in table if p.pid in below]
                continue
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in seen and (proc := read(kid)) is not None:
                    seen.add(kid)
                    found.append(proc)
                    todo.append(kid)
    return found
