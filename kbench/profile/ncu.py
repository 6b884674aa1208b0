"""Nsight Compute (`ncu`): where it is, the command line kbench runs it with, and its CSV read into KernelProfiles."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Sequence
from pathlib import Path

from kbench.errors import ProfileError, UsageError
from kbench.results.profiles import KernelProfile, closest_limit

# Each metric, by the KernelProfile field it fills. ncu prints the exact name asked for (and its .avg/.min/.max
# siblings, which are ignored).
DURATION = "gpu__time_duration.sum"
METRICS = {
    "duration_ns": DURATION,
    "dram_bytes_per_s": "dram__bytes.sum.per_second",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
    "shared_static": "launch__shared_mem_per_block_static",
    "shared_dynamic": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
}
KERNEL_NAME = "Kernel Name"
# Options, each for a reason:
# - `--clock-control none`: ncu's default locks the SM clock at base, which made durations 20-30% longer than the
#   judge's timed median on the H100; kbench times at the clocks the GPU chooses, so the profile does too.
# - ncu's default cache control (flush all caches before each kernel) is kept: kbench's timing flushes L2 before each
#   timed call, so both see cold caches.
# - `--profile-from-start off`: only what the target brackets with cudaProfilerStart/Stop (one call after warm-up).
# - `--target-processes all`: the python that ncu starts may hand over to another process (a wrapper, a launcher).
# - `--csv --page raw`: one CSV row per kernel, one column per metric, a units row after the header.
OPTIONS = ("--csv", "--page", "raw", "--clock-control", "none", "--profile-from-start", "off",
           "--target-processes", "all")
FALLBACKS = (Path("/usr/local/cuda/bin/ncu"),)
MISSING = "n/a"
# Unit prefixes ncu prints (SI, as its documentation says: Kbyte = 1,000 bytes), and time units in nanoseconds.
PREFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def find_ncu(cuda_home: Path | None = None) -> Path:
    """ncu on PATH, else in the CUDA toolkit's bin/ (`cuda_home`), else /usr/local/cuda/bin.

    Raises:
        UsageError: none found (exit 2).
    """
    found = shutil.which("ncu")
    if found:
        return Path(found)
    for candidate in (*([cuda_home / "bin" / "ncu"] if cuda_home else []), *FALLBACKS):
        if candidate.is_file():
            return candidate
    raise UsageError("ncu (Nsight Compute) was not found on PATH or in /usr/local/cuda/bin: kbench profile needs it "
                     "(install Nsight Compute, or put ncu on PATH)")


def command(ncu: Path, target: Sequence[str]) -> list[str]:
    """The ncu command line that profiles `target` (a command line) with METRICS."""
    return [str(ncu), *OPTIONS, "--metrics", ",".join(METRICS.values()), *target]


def parse(text: str) -> list[KernelProfile]:
    """The kernels of ncu's `--csv --page raw` output, in launch order. Lines before the CSV header (ncu's ==PROF==
    and ==WARNING== lines, anything the target printed) are skipped; numbers may carry thousands separators; a value
    ncu could not measure ("n/a", empty, a metric it did not print) is None.

    Raises:
        ProfileError: no CSV header with a kernel name and a duration, a row that does not fit it, or a number that
            is not one.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"') and f'"{KERNEL_NAME}"' in line), None)
    if start is None:
        raise ProfileError(f"ncu's output holds no CSV table with a '{KERNEL_NAME}' column: {_first_line(text)}")
    rows = list(csv.reader(line for line in lines[start:] if line.startswith('"')))
    header, units, body = rows[0], rows[1] if len(rows) > 1 else [], rows[2:]
    if DURATION not in header:
        raise ProfileError(f"ncu's CSV has no {DURATION} column: was it run with kbench's metrics?")
    if len(units) != len(header):
        raise ProfileError("ncu's CSV has no units row after its header")
    columns = {name: i for i, name in enumerate(header)}
    kernels = []
    for number, row in enumerate(body, 1):
        if len(row) != len(header):
            raise ProfileError(f"ncu's CSV row {number} has {len(row)} fields, its header {len(header)}")
        kernels.append(_kernel(row, units, columns))
    return kernels


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"it begins {lines[0][:120]!r}" if lines else "it is empty"


def _kernel(row: list[str], units: list[str], columns: dict[str, int]) -> KernelProfile:
    values = {field: _value(row, units, columns, metric) for field, metric in METRICS.items()}
    if values["duration_ns"] is None:
        raise ProfileError(f"ncu measured no duration for kernel {row[columns[KERNEL_NAME]][:80]!r}")
    static, dynamic = values.pop("shared_static"), values.pop("shared_dynamic")
    shared = None if static is None and dynamic is None else int((static or 0) + (dynamic or 0))
    counts = {f: None if values[f] is None else int(values[f] or 0)
              for f in ("registers_per_thread", "block_size", "grid_size")}
    return KernelProfile(
        name=row[columns[KERNEL_NAME]], duration_ns=float(values["duration_ns"] or 0), shared_mem_per_block=shared,
        dram_bytes_per_s=values["dram_bytes_per_s"], dram_pct=values["dram_pct"], sm_pct=values["sm_pct"],
        tensor_pct=values["tensor_pct"], memory_pct=values["memory_pct"], occupancy_pct=values["occupancy_pct"],
        limit=closest_limit(values["memory_pct"], values["sm_pct"]), **counts)


def _value(row: list[str], units: list[str], columns: dict[str, int], metric: str) -> float | None:
    """One metric of a row in base units (ns, bytes, bytes/s, %, counts); None where ncu gave none."""
    index = columns.get(metric)
    if index is None:
        return None
    text = row[index].strip().replace(",", "")
    if not text or text.lower() == MISSING:
        return None
    try:
        number = float(text)
    except ValueError:
        raise ProfileError(f"ncu's value of {metric} is not a number: {row[index][:40]!r}") from None
    return number * _scale(units[index].strip(), metric)


def _scale(unit: str, metric: str) -> float:
    """The factor that turns a value in `unit` into kbench's base unit."""
    if metric == DURATION:
        if unit not in TIME_NS:
            raise ProfileError(f"ncu printed {DURATION} in an unknown unit {unit!r}")
        return TIME_NS[unit]
    if "byte" in unit:
        prefix = unit.split("byte", 1)[0]
        if prefix not in PREFIXES:
            raise ProfileError(f"ncu printed {metric} in an unknown unit {unit!r}")
        return PREFIXES[prefix]
    return 1.0  # %, registers, threads, blocks
