"""What candidates leave in the machine's shared memory folder (/dev/shm), removed once they have ended.

On the CPU a candidate's /dev/shm is a tmpfs of its own (kbench.system.sandbox). On CUDA it must be the machine's:
torch shares a CUDA tensor with a reference count in a file there that the other process opens by name, and the
driver's IPC fails in a process with a /dev/shm of its own (checked on the H100, 2026-11-28). So a CUDA candidate can
write files there that outlive it, for a later solution to read. After each worker (a judge and its candidates) has
exited, `sweep` removes every entry of the folder that was made or changed since this run started, is this user's,
and that no live process holds open or mapped: what a candidate wrote is garbage once it has ended, and what a live
process holds (another slot's evaluation handing a tensor to its judge, say) is kept, to be swept after that one.
What was there before the run, or belongs to another user, is never touched. docs/sandbox.md.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path("/dev/shm")
# Entries changed since this moment are the run's (the module is imported as the run starts, before any worker).
# File systems stamp times from a coarse clock that may lag time.time() by a tick: a margin below it.
RUN_STARTED = time.time() - 0.5


@dataclass(frozen=True)
class Swept:
    """One sweep: the entries it removed and the new ones it left because a live process holds them."""

    removed: tuple[str, ...] = ()
    held: tuple[str, ...] = ()


def sweep(since: float = RUN_STARTED, folder: Path = FOLDER) -> Swept:
    """Remove from `folder` each entry (a file, or a folder with everything in it) changed at or after `since`, owned
    by this user, that no live process holds open or mapped (anything inside it included). Never raises: a folder
    that cannot be read sweeps nothing."""
    uid = os.geteuid()
    try:
        with os.scandir(folder) as entries:
            fresh = [Path(e.path) for e in entries if _is_new(e, since, uid)]
    except OSError:
        return Swept()
    if not fresh:
        return Swept()
    holding = held_paths(str(folder))
    removed, kept = [], []
    for path in fresh:
        inside = str(path) + os.sep
        if str(path) in holding or any(h.startswith(inside) for h in holding):
            kept.append(path.name)
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path.name)
        except FileNotFoundError:
            pass  # another slot's sweep took it
        except OSError:
            kept.append(path.name)
    return Swept(tuple(removed), tuple(kept))


def _is_new(entry: os.DirEntry[str], since: float, uid: int) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return info.st_uid == uid and max(info.st_ctime, info.st_mtime) >= since


def held_paths(prefix: str, proc: Path = Path("/proc")) -> set[str]:
    """The paths under `prefix` that a live process has open (its fds) or mapped (its maps), as /proc shows them."""
    held: set[str] = set()
    start = prefix.rstrip(os.sep) + os.sep
    for pid in _pids(proc):
        held.update(p for p in _open_files(proc / pid) if p.startswith(start))
        held.update(p for p in _mapped_files(proc / pid) if p.startswith(start))
    return held


def _pids(proc: Path) -> Iterable[str]:
    try:
        return [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []


def _open_files(process: Path) -> Iterable[str]:
    try:
        fds = os.listdir(process / "fd")
    except OSError:
        return []
    targets: list[str] = []
    for fd in fds:
        try:
            targets += _as_named(os.readlink(process / "fd" / fd))
        except OSError:
            continue
    return targets


def _mapped_files(process: Path) -> Iterable[str]:
    try:
        with open(process / "maps", "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    # address perms offset dev inode path: the path is the sixth field, and may hold spaces
    return [p for parts in (line.split(maxsplit=5) for line in lines) if len(parts) == 6 for p in _as_named(parts[5])]


def _as_named(path: str) -> list[str]:
    """A path as /proc shows it, and without the mark the kernel adds to a deleted file's (a live file may carry such
    a name itself: both are held)."""
    bare = path.removesuffix(" (deleted)")
    return [path, bare] if bare != path else [path]
