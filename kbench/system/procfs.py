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
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, session, ...
        found.append(Process(int(name), int(fields[1]), int(fields[3]),
                             (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[2]),
                             (int(fields[13]) + int(fields[14])) / CLOCK_TICKS))
    return found


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
