"""Is the machine quiet while kbench times? CPU time other processes took during a timing, and the load average.

Read from /proc on Linux (elsewhere nothing is measured and nothing is said). The processes of the timing's own
session (the judge and its candidate, or the reference's process) are kbench's; every other process's CPU time is
the figure: the machine's busy time over the window minus the session's own.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from kbench.results.diagnostics import GpuState, MachineState
from kbench.results.findings import Finding, FindingCode
from kbench.system.cores import CPU_ROOT
from kbench.system.procfs import CLOCK_TICKS, processes, read, subtree

# Other processes kept at least this many cores busy on average (CPU runs: any of it shares the timed cores), or on
# a GPU run this share of the machine's cores (the timed process needs one core to issue its launches).
T = TypeVar("T")
BUSY_CORES_CPU = 0.5
BUSY_SHARE_GPU = 0.25


@dataclass(frozen=True)
class CpuSnapshot:
    """Busy CPU seconds of the whole machine and of this session's processes, at one instant."""

    at: float
    machine_busy_s: float
    session_busy_s: float
    load_average: float


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already counted in user and nice
    return (sum(fields) - idle - guest) / CLOCK_TICKS


def _session_busy_s(sid: int) -> float:
    return sum(p.cpu_s for p in processes() if p.sid == sid)


def snapshot() -> CpuSnapshot | None:
    """Now; None where /proc cannot be read."""
    try:
        return CpuSnapshot(time.monotonic(), _machine_busy_s(), _session_busy_s(os.getsid(0)), os.getloadavg()[0])
    except (OSError, ValueError, IndexError):
        return None


def core_mhz(allowed: Callable[[], set[int]] = lambda: os.sched_getaffinity(0),
             root: Path = CPU_ROOT, cpuinfo: Path = Path("/proc/cpuinfo")) -> float | None:
    """The clock of the one core this process may run on (a pinned timing), in MHz, as the kernel reports it
    (cpufreq's, else /proc/cpuinfo's `cpu MHz`; on most drivers a recent average): host-bound work slows with it when
    more of the package's cores are busy. None for a process allowed more than one core, or where the kernel reports
    no frequency."""
    try:
        cores = allowed()
        if len(cores) != 1:
            return None
        core = next(iter(cores))
        try:
            return round(int((root / f"cpu{core}" / "cpufreq" / "scaling_cur_freq").read_text()) / 1000.0, 1)
        except (OSError, ValueError):
            return _cpuinfo_mhz(cpuinfo.read_text(), core)
    except (OSError, ValueError, AttributeError):
        return None


def _cpuinfo_mhz(text: str, core: int) -> float | None:
    """`cpu MHz` of processor `core` in /proc/cpuinfo's text (None where that processor has none)."""
    for block in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if fields.get("processor") == str(core) and "cpu MHz" in fields:
            return round(float(fields["cpu MHz"]), 1)
    return None


def others(before: CpuSnapshot | None, after: CpuSnapshot | None) -> MachineState:
    """What other processes used between two snapshots: `other_cores` (their CPU seconds per second), the load
    average at the start, the window and the machine's core count. Nothing measured when either snapshot is
    missing."""
    if before is None or after is None or after.at <= before.at:
        return MachineState()
    window = after.at - before.at
    other = (after.machine_busy_s - before.machine_busy_s) - (after.session_busy_s - before.session_busy_s)
    return MachineState(other_cores=round(max(other, 0.0) / window, 3), load_average=round(before.load_average, 2),
                        window_s=round(window, 3), cores=float(os.cpu_count() or 1))


def watched(measure: Callable[[], T], device: str, own_processes: int) -> tuple[T, MachineState, list[Finding]]:
    """measure(), and what the machine did meanwhile: other processes' CPU time (and on CUDA the GPU as NVML or
    nvidia-smi sees it right after, with `own_processes` of kbench's holding contexts on it), and its warnings."""
    before = snapshot()
    result = measure()
    state = replace(others(before, snapshot()), core_mhz=core_mhz())
    found = [w for w in (busy_warning(state, device),) if w is not None]
    if device == "cuda":
        state = replace(state, gpu=gpu_state())
        found += gpu_warnings(state.gpu or GpuState(), own_processes)
    return result, state, found


def busy_warning(state: MachineState, device: str) -> Finding | None:
    """`[machine_busy]` when other processes kept cores busy while this row was timed."""
    cores, other = state.cores, state.other_cores
    if cores is None or other is None:
        return None  # nothing measured (no /proc): nothing said
    limit = BUSY_CORES_CPU if device == "cpu" else max(1.0, BUSY_SHARE_GPU * cores)
    if other < limit:
        return None
    return (Finding(FindingCode.MACHINE_BUSY, f"other processes kept {other:.1f} of {cores:.0f} CPU cores busy "
            f"while this was timed (load average {state.load_average or 0.0:.1f} at the start): the times may be "
            "slower than on a quiet machine"))


# nvidia-smi's clock-event reasons that mean the GPU ran slower than it could: software power cap, hardware slowdown,
# software and hardware thermal slowdown, power brake.
THROTTLE_BITS = {0x4: "power cap", 0x8: "hardware slowdown", 0x40: "thermal (software)", 0x80: "thermal (hardware)",
                 0x100: "power brake"}
_GPU_QUERIES = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer and older drivers' name


def _smi(args: list[str]) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


class Nvml:
    """The few NVML queries `gpu_state` makes, through ctypes from the driver's libnvidia-ml: what nvidia-smi reports,
    without starting it (two nvidia-smi processes after every timing cost 0.14-0.2 s of each row on the H100 machine).
    `read(index)` is None where the library or a query fails (nvidia-smi is asked then)."""

    SUCCESS, INSUFFICIENT_SIZE, CLOCK_SM = 0, 7, 1

    def __init__(self) -> None:
        self._lib: Any = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == self.SUCCESS:
                self._lib = lib
        except (OSError, AttributeError):
            pass

    def read(self, index: int) -> tuple[GpuState, list[int] | None] | None:
        """The GPU's state, and the processes holding a context on it (None where the list cannot be read)."""
        lib = self._lib
        if lib is None:
            return None
        try:
            handle, sm, top, reasons = ctypes.c_void_p(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
            count = ctypes.c_uint(0)
            if (lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != self.SUCCESS
                    or lib.nvmlDeviceGetClockInfo(handle, self.CLOCK_SM, ctypes.byref(sm)) != self.SUCCESS
                    or lib.nvmlDeviceGetMaxClockInfo(handle, self.CLOCK_SM, ctypes.byref(top)) != self.SUCCESS
                    or lib.nvmlDeviceGetCurrentClocksThrottleReasons(handle, ctypes.byref(reasons)) != self.SUCCESS
                    or lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), None)
                    not in (self.SUCCESS, self.INSUFFICIENT_SIZE)):
                return None
            pids = self._pids(handle, count.value)
        except (OSError, AttributeError):
            return None
        return GpuState(sm_mhz=sm.value, max_sm_mhz=top.value, throttled=_reasons(reasons.value),
                        compute_processes=count.value), pids

    def _pids(self, handle: Any, count: int) -> list[int] | None:
        """The processes holding a context on the GPU (None where the list cannot be read)."""
        if count == 0:
            return []
        size = ctypes.c_uint(count + 4)  # room for some that started since the count
        infos = (_ProcessInfo * size.value)()
        if self._lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(size), infos) != self.SUCCESS:
            return None
        return [infos[i].pid for i in range(size.value)]


class _ProcessInfo(ctypes.Structure):
    """NVML's nvmlProcessInfo_t (v3 of the process queries)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


@functools.cache
def nvml() -> Nvml:
    """The process's NVML, initialised on first use (a worker started ahead of its job calls it then)."""
    return Nvml()


def _nvml_read(index: int) -> tuple[GpuState, list[int] | None] | None:
    return nvml().read(index)


def _reasons(bits: int) -> tuple[str, ...]:
    """The names of the throttle reasons set in `bits` (THROTTLE_BITS)."""
    return tuple(name for bit, name in THROTTLE_BITS.items() if bits & bit)


def kbench_elsewhere(pids: list[int], judge: int | None = None) -> int:
    """How many of `pids` are kbench's own processes outside this judge's tree: the other children of the judge's
    parent (the run's zygote, or the run itself) and their descendants, i.e. the slot's next worker and its candidate,
    started ahead on this GPU. Neither a solution's process (it stays in the judge's tree: the judge is its subreaper)
    nor another program's is among them. 0 where /proc cannot tell, or the judge's parent is init."""
    me = read(os.getpid() if judge is None else judge)
    if me is None or me.ppid <= 1:
        return 0
    family = {p.pid for p in subtree(me.ppid)} - {p.pid for p in subtree(me.pid)} - {me.pid}
    return sum(1 for pid in pids if pid in family)


def gpu_state(run: Callable[[list[str]], str | None] = _smi,
              nvml: Callable[[int], tuple[GpuState, list[int] | None] | None] = _nvml_read,
              kbench: Callable[[list[int]], int] = kbench_elsewhere) -> GpuState:
    """The timed GPU now: SM clock and its maximum (MHz), the active throttle reasons, how many compute processes
    hold a context on it, from NVML (`Nvml`), else as nvidia-smi sees it, and how many of them are kbench's own
    outside this judge (`kbench`: `kbench_elsewhere`, the slot's next worker started ahead). Empty where neither says
    anything."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    if visible.isdigit() and (found := nvml(int(visible))) is not None:
        state, pids = found
        return replace(state, kbench_elsewhere=kbench(pids)) if pids else state
    state = GpuState()
    for query in _GPU_QUERIES:
        out = run(["-i", visible, f"--query-gpu=clocks.sm,clocks.max.sm,{query}", "--format=csv,noheader,nounits"])
        if out:
            fields = [f.strip() for f in out.strip().splitlines()[0].split(",")]
            try:
                sm, top, reasons = int(fields[0]), int(fields[1]), int(fields[2], 16)
            except (ValueError, IndexError):
                continue
            state = replace(state, sm_mhz=sm, max_sm_mhz=top, throttled=_reasons(reasons))
            break
    apps = run(["-i", visible, "--query-compute-apps=pid", "--format=csv,noheader"])
    if apps is not None:
        listed = [line.strip() for line in apps.splitlines() if line.strip()]
        state = replace(state, compute_processes=len(listed))
        if (pids := [int(p) for p in listed if p.isdigit()]):
            state = replace(state, kbench_elsewhere=kbench(pids))
    return state


def gpu_warnings(state: GpuState, own_processes: int) -> list[Finding]:
    """`[gpu_busy]` when other processes hold contexts on the timed GPU, `[gpu_throttled]` when it was slowed (read
    right after the timing, while its clocks still show the work)."""
    found = []
    if state.compute_processes is not None:
        # gpu_state's count, less kbench's own (this judge's, and the slot's next worker started ahead)
        others = state.compute_processes - own_processes - state.kbench_elsewhere
        if others > 0:
            found.append(Finding(FindingCode.GPU_BUSY, f"{others} other process(es) held a context on this GPU while "
                                 "this was timed: the times may be slower than on an idle GPU"))
    if state.throttled:
        found.append(Finding(FindingCode.GPU_THROTTLED, "the GPU was slowed while this was timed "
                             f"({', '.join(state.throttled)}; SM clock {state.sm_mhz} of {state.max_sm_mhz} MHz)"))
    return found
