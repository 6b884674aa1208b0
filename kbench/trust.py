"""Checks beyond the verdict, run in the child: replaced functions, determinism, float64 accuracy, own-kernel share.

Imported by the worker before any solution, like the comparison and timing modules.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from typing import Any

import torch

from kbench import correctness
from kbench.records import MathFlags
from kbench.timing import synchronize

_where, _isfinite = torch.where, torch.isfinite  # bound before any solution is imported


def guarded_attributes() -> list[tuple[str, Any, str]]:
    """Functions a solution could replace to fool timing or checks: (label, owner, attribute)."""
    import torch.testing

    return [
        ("torch.cuda.Event", torch.cuda, "Event"), ("torch.cuda.synchronize", torch.cuda, "synchronize"),
        ("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time"),
        ("time.perf_counter", time, "perf_counter"), ("time.time", time, "time"), ("time.monotonic", time, "monotonic"),
        ("torch.allclose", torch, "allclose"), ("torch.equal", torch, "equal"), ("torch.isclose", torch, "isclose"),
        ("torch.testing.assert_close", torch.testing, "assert_close"), ("torch.Tensor.__eq__", torch.Tensor, "__eq__"),
        ("torch.Tensor.sub", torch.Tensor, "sub"),
        # Not torch.manual_seed: torch's dynamo re-wraps it when first imported, and seeding uses _manual_seed.
    ]


def snapshot_attributes() -> dict[str, Any]:
    return {label: owner.__dict__.get(name, getattr(owner, name, None)) for label, owner, name in guarded_attributes()}


def replaced_attributes(before: dict[str, Any]) -> list[str]:
    after = snapshot_attributes()
    return [label for label, value in before.items() if after.get(label) is not value]


ACCURACY_FLAG_FACTOR = 10.0  # a solution this many times further from float64 than the reference is flagged
ACCURACY_FLOOR = 1e-6  # errors below this are rounding noise, never flagged
# Where the run allows TF32, a solution may be as far from float64 as TF32 rounding of the inputs and parameters
# puts the reference, times this slack (bf16 rounds 8x coarser than TF32, so it stays flagged).
TF32_SLACK = 3.0
TF32_MANTISSA_DROP = 13  # float32 keeps 23 mantissa bits, TF32 10
PROFILED_CALLS = 3


NONDETERMINISM_FACTOR = 10.0  # a solution may vary as much as this times the reference (cuDNN is not bitwise stable)


def _two_calls(model: Any, inputs: list[Any], device: str) -> tuple[Any, float]:
    """Call twice on clones of the same inputs; the first output and the largest difference between the two."""
    first = model(*correctness.clone_inputs(inputs))
    synchronize(device)
    second = model(*correctness.clone_inputs(inputs))
    synchronize(device)
    return first, 0.0 if correctness.identical(first, second) else correctness.max_abs_diff(first, second)


def _optional(result: dict[str, Any], what: str, check: Any) -> Any:
    """Run a check of the harness's own (not of the solution); if it cannot run, say so and go on."""
    try:
        return check()
    except Exception as exc:  # e.g. float64 of a large problem out of GPU memory
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        result["warnings"].append(f"[check_skipped] {what} could not run: {type(exc).__name__}: {str(exc)[:200]}")
        return None


def wants_kernel_profile(job: dict[str, Any]) -> bool:
    """The own-kernel share needs CUDA's profiler; a run may skip it (`--no-kernel-profile`) for throughput."""
    return job["device"] == "cuda" and job.get("kernel_profile", True)


def trust_checks(job: dict[str, Any], reference: Any, candidate: Any, make: Any, result: dict[str, Any],
                 mark: Callable[[str], Any] = lambda name: None,
                 kernel_share: Callable[[list[Any]], dict[str, Any]] | None = None) -> None:
    """Checks beyond the verdict: determinism, accuracy against float64, own-kernel share of GPU time.

    `candidate(*inputs)` returns outputs it no longer touches (the judge's clones of what the candidate delivered).
    `kernel_share(inputs)` profiles the candidate where it runs (its own process). `mark(name)` is called after
    each check, so the caller can time them.
    """
    device = job["device"]
    inputs = make(job["seed"] + 1)
    first, diff = _two_calls(candidate, inputs, device)
    _, ref_diff = _two_calls(reference, inputs, device)
    if diff > NONDETERMINISM_FACTOR * ref_diff:
        result["warnings"].append(
            f"[non_deterministic] two calls on the same inputs differ by up to {diff:.3g} "
            f"(the reference: {ref_diff:.3g}): a race?"
        )
    mark("trust_determinism")
    tf32 = "math" in job and MathFlags(**job["math"]).allows_tf32
    acc = _optional(result, "float64 accuracy", lambda: accuracy_against_fp64(reference, inputs, first, device, tf32))
    if acc is not None:
        result["accuracy"] = acc
        warning = accuracy_warning(acc)
        if warning:
            result["warnings"].append(warning)
    del first
    mark("trust_fp64")
    if wants_kernel_profile(job) and kernel_share is not None:
        share = _optional(result, "kernel profile", lambda: kernel_share(inputs))
        if share is not None:
            result["kernels"] = share
        if share is not None and share["own_s"] == 0:
            result["warnings"].append("[no_custom_kernel] none of the GPU time is spent in the solution's own kernels")
        mark("trust_profile")


def accuracy_warning(acc: dict[str, float]) -> str | None:
    """The [low_accuracy] flag: far less accurate than the reference, and than TF32 where the run allows it."""
    allowed = ACCURACY_FLAG_FACTOR * acc["reference"]
    if "tf32" in acc:
        allowed = max(allowed, TF32_SLACK * acc["tf32"])
    if acc["solution"] <= ACCURACY_FLOOR or acc["solution"] <= allowed:
        return None
    tf32 = f" and {TF32_SLACK:g}x what TF32 rounding costs ({acc['tf32']:.3g})" if "tf32" in acc else ""
    return (f"[low_accuracy] max error vs float64 {acc['solution']:.3g} is over {ACCURACY_FLAG_FACTOR:g}x the reference's "
            f"own {acc['reference']:.3g}{tf32} (reduced precision inside?)")


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32's 10 mantissa bits (to nearest, ties away), as float32."""
    bits = t.float().contiguous().view(torch.int32)
    half = 1 << (TF32_MANTISSA_DROP - 1)
    rounded = (bits + half) & ~((1 << TF32_MANTISSA_DROP) - 1)
    return _where(_isfinite(t.float()), rounded.view(torch.float32), t.float())


def accuracy_against_fp64(reference: Any, inputs: list[Any], candidate_out: Any, device: str,
                          tf32: bool = False) -> dict[str, float]:
    """Max abs error against the reference run in float64: of the reference as run, of the solution and, with
    tf32, of the float64 reference fed TF32-rounded inputs and parameters (what TF32 arithmetic must cost)."""
    ref_out = reference(*correctness.clone_inputs(inputs))
    ref64 = copy.deepcopy(reference).double()
    inputs64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    exact = ref64(*inputs64)
    synchronize(device)
    errors = {"reference": correctness.max_abs_diff(ref_out, exact), "solution": correctness.max_abs_diff(candidate_out, exact)}
    del ref_out
    if tf32:
        with torch.no_grad():
            for p in list(ref64.parameters()) + list(ref64.buffers()):
                if p.is_floating_point():
                    p.copy_(round_to_tf32(p).double())
        rounded = [round_to_tf32(x).double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                   for x in inputs]
        errors["tf32"] = correctness.max_abs_diff(ref64(*rounded), exact)
        synchronize(device)
    del ref64, exact
    return errors


# __global__ [qualifiers] void [qualifiers] name( -- __launch_bounds__ may stand before or after the return type.
_QUALIFIERS = r"(?:(?:__launch_bounds__\s*\([^)]*\)|static|inline|__forceinline__|__noinline__|extern\s+\"C\")\s*)*"
_KERNEL_NAME = re.compile(rf"__global__\s+{_QUALIFIERS}void\s+{_QUALIFIERS}(\w+)\s*\(")


def declared_kernels(source: str) -> set[str]:
    """Names of the __global__ functions a solution's source declares."""
    return set(_KERNEL_NAME.findall(source))


def own_kernel_share(call: Any, arg_sets: list[list[Any]], source: str) -> dict[str, Any]:
    """GPU time in the solution's own kernels (named by its __global__ functions) vs library kernels, over one
    call(*args) per entry of arg_sets and nothing else: inputs are prepared before the profile starts."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    names = declared_kernels(source)
    calls = len(arg_sets)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for args in arg_sets:
            call(*args)
        torch.cuda.synchronize()
    own = library = 0.0
    top: dict[str, float] = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        us = float(getattr(event, "device_time", None) or getattr(event, "cuda_time", 0.0))
        kernel = event.name
        mine = any(re.search(rf"\b{re.escape(n)}\b", kernel) for n in names)
        own, library = (own + us, library) if mine else (own, library + us)
        top[kernel[:80]] = top.get(kernel[:80], 0.0) + us
    total = own + library
    return {
        "own_s": own / 1e6 / calls, "library_s": library / 1e6 / calls,
        "own_share": own / total if total else 0.0, "kernels_declared": sorted(names),
        "top": sorted(top.items(), key=lambda kv: -kv[1])[:5],
    }
