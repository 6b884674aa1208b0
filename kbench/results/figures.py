"""Typed figures of an evaluation beyond its verdict and timing: the hardware floor, accuracy against float64,
the own-kernel share and peak memory. Each is computed by the judge or the reference's child and stored in run.json."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    """What one forward pass must do at least: FLOPs (matmul/conv only) and bytes moved."""

    flops: float
    bytes: float


@dataclass(frozen=True)
class Ceilings:
    """Measured peak rates of one device; flops_kind names the precision the FLOP rate holds for."""

    name: str
    bandwidth_bytes_s: float
    flops_s: float
    flops_kind: str  # "tf32" | "fp32"
    measured_at: str


@dataclass(frozen=True)
class Floor:
    """The floor of one problem on one device, with the work and ceilings it was computed from."""

    seconds: float
    memory_s: float
    compute_s: float
    bound: str  # "memory" | "compute"
    work: Work
    ceilings: Ceilings

    def describe(self) -> str:
        """E.g. "memory-bound: 269.7 MB at 3.0 TB/s" or "compute-bound: 231.9 GFLOP at 47.0 GFLOP/s fp32"."""
        if self.bound == "memory":
            rate = si(self.ceilings.bandwidth_bytes_s, "B/s")
            return f"memory-bound: {si(self.work.bytes, 'B')} at {rate}"
        rate = si(self.ceilings.flops_s, "FLOP/s")
        return f"compute-bound: {si(self.work.flops, 'FLOP')} at {rate} {self.ceilings.flops_kind}"


def si(value: float, unit: str) -> str:
    """Decimal prefixes, as bandwidths and FLOP rates are quoted: 2.0 MB, 3.0 TB/s, 47.0 GFLOP/s."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.1f} {prefix}{unit}"
    return f"{value:.1f} {unit}"


@dataclass(frozen=True)
class Accuracy:
    """Max abs error against the reference run in float64: the solution's, the reference's own as run, and (where
    the run allows TF32) what TF32 rounding of inputs and parameters costs."""

    solution: float
    reference: float
    tf32: float | None = None


@dataclass(frozen=True)
class KernelShare:
    """How much of the solution's GPU time its own kernels take (the profiler's view of a few calls), or why it was
    not profiled."""

    profiled: bool = True
    own_s: float | None = None  # per call
    library_s: float | None = None  # per call: cuBLAS, cuDNN, torch's own kernels
    own_share: float | None = None
    kernels_declared: tuple[str, ...] = ()
    top: tuple[tuple[str, float], ...] = ()  # the five busiest kernels: (name, microseconds over the profile)
    reason: str = ""  # why it was not profiled


@dataclass(frozen=True)
class PeakMemory:
    """Peak bytes a call allocates beyond what was allocated before it (GPU; None where not measured)."""

    solution: int | None = None
    reference: int | None = None
