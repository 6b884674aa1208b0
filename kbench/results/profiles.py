"""`kbench profile`'s records: one kernel's Nsight Compute figures, one model's kernels, and the roofline rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kbench.errors import ResultsError
from kbench.results.codec import ProtocolError, decode, to_wire

# Nsight Compute's own "GPU Speed Of Light" rule of thumb: a kernel whose compute and memory throughput both stay
# under 60% of peak is limited by latency (too few warps, stalls, a short grid), not by either roofline.
LATENCY_BELOW_PCT = 60.0


class Limit(str, Enum):
    """The roofline limit a kernel sits closest to (`closest_limit`)."""

    MEMORY = "memory"
    COMPUTE = "compute"
    LATENCY = "latency"
    UNKNOWN = "unknown"  # ncu gave neither throughput

    def __str__(self) -> str:
        return self.value


def closest_limit(memory_pct: float | None, sm_pct: float | None) -> Limit:
    """Memory when the memory throughput (% of peak) is the larger, compute when the SM throughput is; latency when
    both are below LATENCY_BELOW_PCT; unknown when neither was measured."""
    if memory_pct is None and sm_pct is None:
        return Limit.UNKNOWN
    memory, compute = memory_pct or 0.0, sm_pct or 0.0
    if max(memory, compute) < LATENCY_BELOW_PCT:
        return Limit.LATENCY
    return Limit.MEMORY if memory >= compute else Limit.COMPUTE


@dataclass(frozen=True)
class KernelProfile:
    """One kernel launch as Nsight Compute measured it (None: ncu reported no value)."""

    name: str
    duration_ns: float  # gpu__time_duration.sum
    dram_bytes_per_s: float | None = None  # dram__bytes.sum.per_second
    dram_pct: float | None = None  # dram__throughput, % of peak
    sm_pct: float | None = None  # sm__throughput, % of peak
    tensor_pct: float | None = None  # tensor-core (HMMA) pipe active, % of peak
    memory_pct: float | None = None  # gpu__compute_memory_throughput: the busiest of DRAM, L2 and L1, % of peak
    occupancy_pct: float | None = None  # achieved occupancy: sm__warps_active, % of the SM's warps
    registers_per_thread: int | None = None
    shared_mem_per_block: int | None = None  # bytes, static and dynamic
    block_size: int | None = None  # threads per block
    grid_size: int | None = None  # blocks
    limit: Limit = Limit.UNKNOWN


@dataclass(frozen=True)
class ModelProfile:
    """One model's profiled call: eager (solution "eager") or a solution, each in a process of its own."""

    problem: str
    solution: str
    kernels: tuple[KernelProfile, ...]
    tool: str = ""  # ncu's version line
    sandbox: str = ""  # the sandbox level of the profiled process, and why not more

    @property
    def total_ns(self) -> float:
        return sum(k.duration_ns for k in self.kernels)


def profiles_to_json(profiles: Sequence[ModelProfile]) -> list[Any]:
    return [to_wire(p) for p in profiles]


def profiles_of(doc: Mapping[str, object]) -> list[ModelProfile]:
    """The profiles a run file holds (none in runs of `kbench run`, or older files), checked field by field."""
    raw = doc.get("profiles") or []
    if not isinstance(raw, list):
        raise ResultsError(f"run {doc.get('run_id', '?')} has a malformed profiles section (not a list)")
    try:
        return [decode(ModelProfile, p) for p in raw]
    except ProtocolError as exc:
        raise ResultsError(f"run {doc.get('run_id', '?')} has a malformed profile ({exc})") from None
