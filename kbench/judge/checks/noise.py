"""The reference's own noise: how far the reference, as run, is from a float64 evaluation of the same weights and
inputs, next to the tolerance it is judged at.

An exact implementation's outputs (the float64 result rounded to the output dtype) are compared with the
reference's exactly as the judge compares a solution's. When they fail, the tolerance is below the reference's own
rounding noise: only an implementation that reproduces the library's rounding can pass. The likely cause is named:
TF32 (when the run allows it on CUDA at fp32 and the reference passes with it off), the reduced precision, or
float32 rounding in the library's algorithms. Run in the reference's process (eager row) and by `kbench list
--check`, per precision. A harness check: when it cannot run, `[check_skipped]` with the reason.
"""

from __future__ import annotations

from typing import Any

import torch

from kbench.judge.checks import comparison, trust
from kbench.judge.timing.timers import synchronize
from kbench.results.diagnostics import ReferenceNoise
from kbench.results.findings import Finding, FindingCode


def _like(exact: Any, out: Any) -> Any:
    """The float64 result in the reference output's dtype (what an exact implementation would return)."""
    if isinstance(out, torch.Tensor) and isinstance(exact, torch.Tensor):
        return exact.to(out.dtype)
    if isinstance(out, (tuple, list)) and isinstance(exact, (tuple, list)):
        return type(out)(_like(e, o) for e, o in zip(exact, out))
    return exact


def _passes(exact: Any, out: Any, atol: float, rtol: float) -> bool:
    return comparison.compare(_like(exact, out), out, atol, rtol)[0]


def _without_tf32(reference: Any, inputs: list[Any], device: str) -> Any:
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out = reference(*inputs)
        synchronize(device)
        return out
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def reference_noise(reference: Any, inputs: list[Any], out: Any, device: str, precision: str, atol: float,
                    rtol: float, tf32: bool) -> tuple[ReferenceNoise | None, list[Finding]]:
    """(figures, warnings): the reference's max error against float64, whether an exact implementation passes at
    (atol, rtol), and the cause when it does not; `[tolerance_below_noise]` or `[check_skipped]` as warnings."""
    if (no_room := trust.fp64_no_room("the reference-noise check", reference, inputs, out, device)) is not None:
        return None, [no_room]
    try:
        ref64, exact = trust.float64_run(reference, inputs, device)
        del ref64
        passes = _passes(exact, out, atol, rtol)
        noise = ReferenceNoise(precision, atol, rtol, comparison.max_abs_diff(out, exact), passes, None if passes else
                               _cause(reference, inputs, exact, device, precision, atol, rtol, tf32))
        del exact
    except Exception as exc:  # noqa: BLE001 - out of memory, a model without float64: the harness's check only
        return None, [trust.skipped("the reference-noise check", exc)]
    if noise.exact_passes:
        return noise, []
    return noise, [Finding(FindingCode.TOLERANCE_BELOW_NOISE, f"the reference itself is {noise.max_abs:.2g} "
                   f"from a float64 evaluation of the same weights and inputs, and an exact result fails "
                   f"atol={atol:g}, rtol={rtol:g}: only an implementation that reproduces the library's rounding "
                   f"can pass (cause: {noise.cause})")]


def _cause(reference: Any, inputs: list[Any], exact: Any, device: str, precision: str, atol: float, rtol: float,
           tf32: bool) -> str:
    if tf32 and device == "cuda" and precision == "fp32" and _passes(exact, _without_tf32(reference, inputs, device),
                                                                      atol, rtol):
        return "TF32, on in this run for cuDNN or matmul; --no-tf32 turns it off"
    if precision != "fp32":
        return f"{precision} arithmetic"
    return "float32 rounding in the library's algorithms"
