"""The hardware floor of a problem: the least time any solution could take on the measured machine.

A forward pass must at least move its bytes and do its arithmetic, so two numbers bound it from below:
the minimal bytes (inputs, parameters and buffers read once, outputs written once) over the measured
memory bandwidth, and the FLOPs over the measured peak FLOP rate. The floor is the larger of the two,
and the problem is called memory- or compute-bound after it. The rates are measured on this machine (a
device-to-device copy, a large float32 matmul), not read from a datasheet, since datasheet peaks are
never reached and a floor must be one that real code can approach. FLOPs come from
`torch.utils.flop_counter`, which counts only matmul and convolution (2 per multiply-add); elementwise
ops, reductions and pooling count as free, so the compute floor is a lower bound as well.

A solution timed below the floor did not do the work in the timed window: work escaped the timer, was
skipped, or was served from a cache. Timing flushes L2 before each sample, so DRAM bandwidth is right.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from kbench.results.storage import atomic_write
from kbench.system.environment import _cpu_model

_perf_counter = time.perf_counter

Clock = Callable[[], float]

CACHE_FORMAT = 1
FLOOR_TOLERANCE = 0.05  # copy bandwidth trails read-mostly bandwidth by a few percent; don't cry wolf at 99%
MAX_SPEEDUP = 10.0


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
class MeasureSizes:
    """How big and how often the ceiling benchmarks run; small enough to stay under ~4 GiB on a GPU."""

    copy_bytes: int
    matmul_n: int
    warmup: int = 2
    repeats: int = 10


CUDA_SIZES = MeasureSizes(copy_bytes=1 << 30, matmul_n=8192)  # 2 GiB for the copy, 768 MiB for the matmul
CPU_SIZES = MeasureSizes(copy_bytes=256 << 20, matmul_n=2048)


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
            rate = _si(self.ceilings.bandwidth_bytes_s, "B/s")
            return f"memory-bound: {_si(self.work.bytes, 'B')} at {rate}"
        rate = _si(self.ceilings.flops_s, "FLOP/s")
        return f"compute-bound: {_si(self.work.flops, 'FLOP')} at {rate} {self.ceilings.flops_kind}"


def _si(value: float, unit: str) -> str:
    """Decimal prefixes, as bandwidths and FLOP rates are quoted: 2.0 MB, 3.0 TB/s, 47.0 GFLOP/s."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.1f} {prefix}{unit}"
    return f"{value:.1f} {unit}"


# ---- work ------------------------------------------------------------------------------------------


def _tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in value, looking inside tuples, lists and dict values."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


def _forward(model: torch.nn.Module, inputs: Sequence[Any], device: torch.device | str | None) -> Any:
    if device is None:
        return model(*inputs)
    # functional_call swaps in moved copies for this one call, so the caller's model keeps its weights
    # (model.to("meta") would destroy them). Tensors kept as plain attributes are not moved.
    state = {k: v.to(device) for k, v in [*model.named_parameters(), *model.named_buffers()]}
    moved = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    return torch.func.functional_call(model, state, tuple(moved))


def problem_work(
    model: torch.nn.Module, inputs: Sequence[Any], device: torch.device | str | None = None
) -> Work:
    """FLOPs and minimal bytes of one forward of model(*inputs).

    FLOPs count matmul and convolution only (FlopCounterMode); elementwise ops are not counted.
    A transposed convolution is counted over its input positions, taps that padding crops included,
    so its FLOPs run a few percent high.
    Bytes: each tensor input, parameter and buffer read once, each output tensor written once.
    `device="meta"` runs the forward on meta tensors: shapes and FLOPs without memory or compute,
    which is how a full-size problem is sized on a CPU.
    """
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        output = _forward(model, inputs, device)
    read = _tensor_bytes(list(inputs)) + _tensor_bytes([*model.parameters(), *model.buffers()])
    return Work(flops=float(counter.get_total_flops()), bytes=float(read + _tensor_bytes(output)))


# ---- ceilings --------------------------------------------------------------------------------------


def flops_kind(device: torch.device, tf32: bool) -> str:
    """CPUs have no TF32 path, so their rate is always fp32."""
    return "tf32" if tf32 and device.type == "cuda" else "fp32"


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_model()


def _best_seconds(fn: Callable[[], object], device: torch.device, sizes: MeasureSizes, clock: Clock) -> float:
    """The fastest of `repeats` calls after `warmup` calls: the best is the closest to the true peak."""
    for _ in range(sizes.warmup):
        fn()
    times: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        event = torch.cuda.Event
        pairs = [(event(enable_timing=True), event(enable_timing=True)) for _ in range(sizes.repeats)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        times = [start.elapsed_time(end) / 1e3 for start, end in pairs]
    else:
        for _ in range(sizes.repeats):
            begin = clock()
            fn()
            times.append(clock() - begin)
    return min(times)


def _bandwidth(device: torch.device, sizes: MeasureSizes, clock: Clock) -> float:
    src = torch.ones(sizes.copy_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = _best_seconds(lambda: dst.copy_(src), device, sizes, clock)
    return 2 * src.numel() * src.element_size() / seconds  # each byte is read once and written once


def _peak_flops(device: torch.device, tf32: bool, sizes: MeasureSizes, clock: Clock) -> float:
    n = sizes.matmul_n
    a = torch.randn(n, n, dtype=torch.float32, device=device)
    b = torch.randn(n, n, dtype=torch.float32, device=device)
    out = torch.empty_like(a)
    with _matmul_tf32(tf32 and device.type == "cuda"):
        seconds = _best_seconds(lambda: torch.mm(a, b, out=out), device, sizes, clock)
    return 2 * n**3 / seconds


@contextlib.contextmanager
def _matmul_tf32(allowed: bool) -> Iterator[None]:
    """Set the flag both ways (the caller's setting must not leak into the measurement), then restore it."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def measure_ceilings(
    device: torch.device, tf32: bool, clock: Clock = _perf_counter, sizes: MeasureSizes | None = None
) -> Ceilings:
    """Measure copy bandwidth and matmul peak on `device` (CUDA events on a GPU, `clock` on a CPU)."""
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"cannot measure ceilings on device type {device.type!r}; use cuda or cpu")
    sizes = sizes or (CUDA_SIZES if device.type == "cuda" else CPU_SIZES)
    bandwidth = _bandwidth(device, sizes, clock)
    flops_s = _peak_flops(device, tf32, sizes, clock)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # hand the 2 GiB back before solutions are timed in this process
    return Ceilings(
        name=device_name(device),
        bandwidth_bytes_s=bandwidth,
        flops_s=flops_s,
        flops_kind=flops_kind(device, tf32),
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def cache_path(cache_dir: Path, name: str, kind: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{name}-torch{torch.__version__}").strip("_")
    return cache_dir / f"ceilings-{slug}-{kind}.json"


def _read_cache(path: Path) -> Ceilings | None:
    """The cached ceilings, or None when the file is missing, unreadable or holds nonsense."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.pop("format") != CACHE_FORMAT:
            return None
        ceilings = Ceilings(**doc)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    rates = (ceilings.bandwidth_bytes_s, ceilings.flops_s)
    if not all(isinstance(r, (int, float)) and math.isfinite(r) and r > 0 for r in rates):
        return None
    return ceilings


def cached_ceilings(
    cache_dir: Path,
    device: torch.device,
    tf32: bool,
    measure: Callable[[torch.device, bool], Ceilings] = measure_ceilings,
) -> Ceilings:
    """Ceilings measured once per (device name, torch version, flops kind) and kept as JSON in cache_dir.

    A missing or corrupt file is measured again and replaced atomically, so a concurrent reader sees
    either the old file or the new one.
    """
    path = cache_path(cache_dir, device_name(device), flops_kind(device, tf32))
    cached = _read_cache(path)
    if cached is not None:
        return cached
    ceilings = measure(device, tf32)
    atomic_write(path, json.dumps({"format": CACHE_FORMAT, **dataclasses.asdict(ceilings)}, indent=1) + "\n")
    return ceilings


# ---- floor and verdicts ----------------------------------------------------------------------------


def floor_to_json(fl: Floor) -> dict[str, Any]:
    return dataclasses.asdict(fl)


def floor_from_json(data: dict[str, Any]) -> Floor:
    return Floor(**{**data, "work": Work(**data["work"]), "ceilings": Ceilings(**data["ceilings"])})


def floor(work: Work, ceilings: Ceilings) -> Floor:
    memory_s = work.bytes / ceilings.bandwidth_bytes_s
    compute_s = work.flops / ceilings.flops_s
    bound = "compute" if compute_s > memory_s else "memory"
    return Floor(max(memory_s, compute_s), memory_s, compute_s, bound, work, ceilings)


def percent_of_floor(solution_s: float, fl: Floor) -> float:
    """Floor over solution time in percent: 100 means at the floor, 50 means twice the floor."""
    return fl.seconds / solution_s * 100 if solution_s > 0 else math.inf


def below_floor(solution_s: float, fl: Floor | None, tolerance: float = FLOOR_TOLERANCE) -> str | None:
    """Why a median is below the floor, or None. `tolerance` is the fraction below the floor that still passes (the
    measured ceilings are best efforts, not exact limits). A compute-bound floor holds for its flops_kind only: a
    solution that computes in lower precision can go below it honestly."""
    if fl is None or solution_s >= fl.seconds * (1 - tolerance):
        return None
    return (f"faster than the hardware floor: {solution_s * 1e3:.3f} ms < {fl.seconds * 1e3:.3f} ms "
            f"({fl.describe()}) — check for work escaping the timer or skipped work")


def far_ahead(solution_s: float, eager_s: float | None, max_speedup: float = MAX_SPEEDUP) -> str | None:
    """Why a median is far below eager's (a heuristic: worth a look, not a verdict), or None."""
    if eager_s is None:
        return None
    speedup = eager_s / solution_s if solution_s > 0 else math.inf
    return f"{speedup:.1f}x faster than eager: review before trusting" if speedup > max_speedup else None


def plausibility(
    solution_s: float,
    eager_s: float | None,
    fl: Floor | None,
    max_speedup: float = MAX_SPEEDUP,
    tolerance: float = FLOOR_TOLERANCE,
) -> list[str]:
    """Warnings for a solution median that is too fast to believe: below the floor, or far below eager."""
    found = (below_floor(solution_s, fl, tolerance), far_ahead(solution_s, eager_s, max_speedup))
    return [w for w in found if w is not None]
