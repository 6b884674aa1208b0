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

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from kbench.results.figures import Ceilings, Floor, Work
from kbench.results.findings import Finding, FindingCode

FLOOR_TOLERANCE = 0.05  # copy bandwidth trails read-mostly bandwidth by a few percent; don't cry wolf at 99%
MAX_SPEEDUP = 10.0


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


# ---- floor and verdicts ----------------------------------------------------------------------------


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


def floor_findings(solution_s: float, eager_s: float | None, fl: Floor | None, max_speedup: float = MAX_SPEEDUP,
                   tolerance: float = FLOOR_TOLERANCE) -> list[Finding]:
    """What a median too fast to believe is flagged with: `[below_floor]` (the timing cannot be trusted: the row is
    `suspect`, kbench.judge.verdict) and `[implausible_speed]` (far below eager's: a heuristic, a warning only)."""
    found = ((FindingCode.BELOW_FLOOR, below_floor(solution_s, fl, tolerance)),
             (FindingCode.IMPLAUSIBLE_SPEED, far_ahead(solution_s, eager_s, max_speedup)))
    return [Finding(code, why) for code, why in found if why is not None]
