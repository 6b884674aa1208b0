"""Ceilings: the measured peak copy bandwidth and matmul rate of a device, cached per device, torch and precision."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from kbench.judge.timing.timers import HostTimer
from kbench.results.figures import Ceilings
from kbench.results.storage import atomic_write
from kbench.system.environment import cpu_model

_perf_counter = time.perf_counter

Clock = Callable[[], float]

CACHE_FORMAT = 1


@dataclass(frozen=True)
class MeasureSizes:
    """How big and how often the ceiling benchmarks run; small enough to stay under ~4 GiB on a GPU."""

    copy_bytes: int
    matmul_n: int
    warmup: int = 2
    repeats: int = 10


CUDA_SIZES = MeasureSizes(copy_bytes=1 << 30, matmul_n=8192)  # 2 GiB for the copy, 768 MiB for the matmul
CPU_SIZES = MeasureSizes(copy_bytes=256 << 20, matmul_n=2048)


def flops_kind(device: torch.device, tf32: bool) -> str:
    """CPUs have no TF32 path, so their rate is always fp32."""
    return "tf32" if tf32 and device.type == "cuda" else "fp32"


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def _best_seconds(fn: Callable[[], object], device: torch.device, sizes: MeasureSizes, clock: Clock) -> float:
    """The fastest of `repeats` calls after `warmup` calls: the best is the closest to the true peak.

    On a GPU the calls are queued back to back between their own events and synchronized once, so that the device
    runs flat out; timers.CudaEventTimer synchronizes and flushes L2 before every call, which would put idle gaps
    between them. On a CPU each call is timed by timers.HostTimer with `clock`."""
    for _ in range(sizes.warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        event = torch.cuda.Event
        pairs = [(event(enable_timing=True), event(enable_timing=True)) for _ in range(sizes.repeats)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return min(start.elapsed_time(end) / 1e3 for start, end in pairs)
    timer = HostTimer(clock)
    return min(timer.sample(fn)[0] for _ in range(sizes.repeats))


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
