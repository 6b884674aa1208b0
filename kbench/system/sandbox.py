"""The candidate's sandbox on Linux (docs/sandbox.md): namespaces of its own, a read-only machine, and limits.

Two steps, because the candidate starts before its job is known:
- `enter()`, first thing in the candidate's process (single-threaded, before CUDA): a PID namespace, a network
  namespace with no interface up, a mount namespace (and a user namespace when not root). The process forks: the child
  is PID 1 of the new namespace and goes on as the candidate; the parent only waits for it. The child mounts a fresh
  /proc (CUDA needs one that matches its namespace) and makes every mount private to it. It cannot see or signal any
  process outside, and when it ends the kernel ends everything it started.
- `restrict(Plan)`, when the job is known, before the solution is imported: a private temporary folder, the
  solution's own folder emptied but for its file and data (no other solution's source), the build cache emptied but
  for its own build folder, then the whole file system read-only (/dev too: its device files stay usable) but for the
  temporary folder and /dev/shm; the build folder and the kernel DSLs' caches are overlays whose writes go to the
  temporary folder (what kbench built shows through, and what the candidate writes there goes with it); an IPC
  namespace of its own (System V shared memory, semaphores and message queues, POSIX message queues: they end with
  it); on the CPU /dev/shm is a tmpfs of its own (on CUDA it is the machine's, swept when the candidate's worker has
  exited: kbench.system.shared_memory).
Then limits: no new privileges, no core dumps, a file-size cap, a process cap (not for root).

`KBENCH_SANDBOX=none` turns it off (tests of what happens without it). Where namespaces cannot be made (not Linux, no
user namespaces for this user), only the limits apply: the level says which (`NAMESPACES`, `WRITES_KEPT` where no
overlay could be mounted, `LIMITS`, `NONE`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kbench.system.lifetime import die_with_parent

NAMESPACES, LIMITS, NONE = "namespaces", "limits", "none"
# Namespaces, but the build folder and the DSL caches could not be overlaid: what the candidate writes there stays
WRITES_KEPT = "namespaces_writes_kept"
ENV = "KBENCH_SANDBOX"
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
SYS_MOUNT_SETATTR = 442  # the same number on x86-64 and arm64
PR_SET_NO_NEW_PRIVS = 38
FILE_SIZE_CAP = 16 << 30  # bytes one file may grow to (a runaway writer stops here)
PROCESS_CAP = 4096  # processes of this user (RLIMIT_NPROC; root is not held to it)
TMPFS_SIZE = "size=8g"
SHM = "/dev/shm"
_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


@dataclass(frozen=True)
class SandboxPlan:
    """What the candidate of one job may see and write besides the read-only machine."""

    solution: str  # the solution's file: its folder is emptied but for it (and files that are not Python)
    build_dir: str | None = None  # its own build folder (writable); the rest of the build cache is emptied
    writable: tuple[str, ...] = ()  # folders that stay writable (the kernel DSLs' caches)
    # /dev/shm a tmpfs of the candidate's own. Only where no CUDA tensor crosses the protocol: torch shares a CUDA
    # tensor with a reference count in a /dev/shm file that the other process opens by name, so on CUDA the judge's
    # and the candidate's must be one (what a CUDA candidate leaves there is swept after it: system.shared_memory).
    private_shm: bool = False
    # An IPC namespace of its own: System V IPC objects and POSIX message queues, which outlive their process
    # otherwise, end with the candidate's namespace.
    private_ipc: bool = True


_entered = [NONE]  # what enter() got in this process: restrict() mounts only inside a mount namespace of its own
# The folder under which each solution file's kernel DSL caches live, one folder per file (kbench.build.compile): the
# candidate sees its own and none of the others'
SOLUTION_CACHES = "solution_caches"
SCRATCH = ".kbench-overlays"  # in the candidate's private temporary folder: what it writes to the overlaid folders


def plan_for(solution: str, env: dict[str, str], device: str) -> SandboxPlan:
    """The plan of a job: its solution, its build folder (TORCH_EXTENSIONS_DIR), the caches its env names, and on the
    CPU a /dev/shm of its own (the device has no default: a private /dev/shm would break a CUDA job's protocol)."""
    return SandboxPlan(str(Path(solution).resolve()), env.get("TORCH_EXTENSIONS_DIR"),
                       tuple(value for key, value in sorted(env.items()) if key.endswith("_CACHE_DIR") and value),
                       private_shm=device == "cpu")



def wanted() -> bool:
    """Whether to sandbox: on Linux unless KBENCH_SANDBOX=none, with a GPU too (checked on the H100 on 2026-11-26:
    CUDA runs, the IPC handles and the signal page work inside the namespaces; docs/benchmarks.md)."""
    asked = os.environ.get(ENV, "auto").lower()
    return asked != NONE and sys.platform.startswith("linux")


def entered() -> str:
    """What `enter()` got in this process."""
    return _entered[0]


def enter() -> str:
    """Into namespaces of its own (see the module's docstring); the level got. Call it single-threaded. Returns in the
    child only: the parent waits for it and exits with its status."""
    if not wanted():
        return NONE
    user = os.geteuid() != 0
    uid, gid = os.geteuid(), os.getegid()
    try:
        _call(_libc.unshare, CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | (CLONE_NEWUSER if user else 0))
    except OSError:
        limit()
        _entered[0] = LIMITS
        return LIMITS
    if user:
        _map_root(uid, gid)
    child = os.fork()
    if child:
        _wait_and_exit(child)
    die_with_parent()
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        _entered[0] = LIMITS  # not even its mounts are its own: nothing more is mounted (a stale /proc breaks CUDA)
        return LIMITS
    _entered[0] = NAMESPACES
    return NAMESPACES


def restrict(plan: SandboxPlan) -> str:
    """The file system for the job (see the module's docstring), then the limits; the level got. Mounts only in the
    mount namespace `enter()` made: anywhere else they would change the whole machine."""
    if not wanted() or _entered[0] == NONE:
        return NONE
    if _entered[0] != NAMESPACES:
        limit()
        return LIMITS
    limit_level = LIMITS
    try:
        tmp = _private_tmp()
        kept = [*plan.writable, *([plan.build_dir] if plan.build_dir else [])]
        for folder in kept:
            os.makedirs(folder, exist_ok=True)
        for hidden, inside in _hidden(plan):
            _empty_but(hidden, inside)
        overlaid = [_overlay(folder, Path(tmp) / SCRATCH / str(index)) for index, folder in enumerate(kept)]
        if plan.private_ipc:
            _call(_libc.unshare, CLONE_NEWIPC)
        if plan.private_shm and os.path.isdir(SHM):
            _mount("tmpfs", SHM, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_SIZE)
        _read_only([tmp, *kept, SHM])
        limit_level = NAMESPACES if all(overlaid) else WRITES_KEPT
    except OSError:
        pass  # not in a mount namespace of its own (or no right to mount): the machine stays as it is
    limit()
    return limit_level


def limit() -> None:
    """No new privileges, no core dumps, a file-size cap, a process cap."""
    try:
        _call(_libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except OSError:
        pass
    for which, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, FILE_SIZE_CAP),
                         (resource.RLIMIT_NPROC, PROCESS_CAP)):
        try:
            _soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))
        except (OSError, ValueError):
            pass


# ---- the pieces ----------------------------------------------------------------------------------------------


def _call(fn: object, *args: object) -> int:
    result = fn(*args)  # type: ignore[operator]
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    _call(_libc.mount, source and source.encode(), target.encode(), kind and kind.encode(), ctypes.c_ulong(flags),
          data and data.encode())


def _map_root(uid: int, gid: int) -> None:
    """In a new user namespace: root inside is this user outside (what mounting needs)."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")


def _wait_and_exit(child: int) -> None:
    """The parent left outside: hold nothing of the candidate's, wait for the child, end as it ended."""
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):  # ended as the child did, so that the judge reads the same signal
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _private_tmp() -> str:
    """An empty tmpfs of its own as the temporary folder (TMPDIR, tempfile)."""
    path = Path(tempfile.gettempdir()) / f"kbench-candidate-{os.getpid()}-{os.getppid()}"
    path.mkdir(exist_ok=True)
    _mount("tmpfs", str(path), "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_SIZE)
    for name in ("TMPDIR", "TEMP", "TMP"):
        os.environ[name] = str(path)
    tempfile.tempdir = str(path)
    return str(path)


def _hidden(plan: SandboxPlan) -> list[tuple[Path, list[Path]]]:
    """The folders to empty, shallowest first, each with what it keeps: the solution's folder keeps its file and the
    files that are not Python, the build cache keeps the job's build folder, the solutions' DSL caches keep the
    job's. Where one lies inside the other (a build folder beside or below the solution), every folder on the way
    down keeps only the next step of it, and each is emptied after the one above it."""
    solution = Path(plan.solution)
    folders: dict[Path, set[Path]] = {solution.parent: {p for p in solution.parent.iterdir() if p.is_file() and (
        p.suffix != ".py" or p == solution)}}
    if plan.build_dir:
        build = Path(plan.build_dir).resolve()
        folders.setdefault(build.parent, set()).add(build)
    for cache in plan.writable:  # a solution's own DSL caches: the other solutions' beside them are emptied
        own = Path(cache).resolve().parent
        if own.parent.name == SOLUTION_CACHES:
            folders.setdefault(own.parent, set()).add(own)
    for inner in list(folders):
        for outer in list(folders):
            if outer in inner.parents:
                step = inner
                while step.parent != outer:
                    folders.setdefault(step.parent, set()).add(step)
                    step = step.parent
                folders[outer].add(step)
    return [(folder, sorted(folders[folder])) for folder in sorted(folders, key=lambda f: len(f.parts))]


def _overlay(folder: str, scratch: Path) -> bool:
    """`folder` as it is, with what the candidate writes there kept in `scratch` (inside its private temporary
    folder, a tmpfs that goes with its mount namespace): the build folder and the kernel DSLs' caches show what kbench
    built, and nothing the candidate writes there outlives its process. False where no overlay can be mounted (no
    overlayfs, or none in a user namespace before Linux 5.11): the folder then stays writable in place, and the level
    says so (WRITES_KEPT)."""
    upper, work = scratch / "upper", scratch / "work"
    try:
        upper.mkdir(parents=True)
        work.mkdir()
        _mount("overlay", folder, "overlay", MS_NOSUID | MS_NODEV,
               f"lowerdir={_escaped(folder)},upperdir={_escaped(str(upper))},workdir={_escaped(str(work))}")
    except OSError as exc:
        print(f"[sandbox] {folder} stays writable in place (no overlay: {exc})", file=sys.stderr, flush=True)
        return False
    return True


def _escaped(path: str) -> str:
    """A path as overlayfs's options take it (its separators escaped)."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _empty_but(folder: Path, keep: list[Path]) -> None:
    """`folder` replaced by an empty tmpfs, with each of `keep` (files or folders inside it) bound back in."""
    stash = [(p, os.open(p, os.O_PATH)) for p in keep if p.exists()]
    _mount("tmpfs", str(folder), "tmpfs", MS_NOSUID | MS_NODEV, "size=64m")
    for path, fd in stash:
        if path.is_dir() or os.path.isdir(f"/proc/self/fd/{fd}"):
            path.mkdir(exist_ok=True)
        else:
            path.touch()
        _mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
        os.close(fd)


def _read_only(writable: list[str]) -> None:
    """Every mount read-only, then the writable ones back (mount_setattr, Linux 5.12; else each mount remounted)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
        for point in _mount_points():
            try:
                _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
            except OSError:
                pass
        return _writable_again(writable, remount=True)
    return _writable_again(writable, remount=False)


def _writable_again(paths: list[str], remount: bool) -> None:
    clear = _MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    for path in paths:
        if not os.path.isdir(path) and not os.path.isfile(path):
            continue
        if not os.path.ismount(path):
            _mount(path, path, None, MS_BIND | MS_REC)  # its own mount, so that it can differ from its parent's
        if remount:
            _mount(None, path, None, MS_REMOUNT | MS_BIND)
        elif _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE, ctypes.byref(clear),
                           ctypes.sizeof(clear)) != 0:
            raise OSError(ctypes.get_errno(), f"{path} could not be made writable again")


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]
