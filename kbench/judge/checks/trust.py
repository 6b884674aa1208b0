"""Checks beyond the verdict, run in the child: replaced functions, determinism, float64 accuracy, own-kernel share.

Imported by the worker before any solution, like the comparison and timing modules.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.profiler
import torch.testing
from torch.autograd import DeviceType

from kbench.judge.candidate.protocol import OwnKernelShare
from kbench.judge.checks import comparison, kernel_names
from kbench.judge.draft import Draft
from kbench.judge.timing.timers import synchronize
from kbench.results.codec import decode
from kbench.results.figures import Accuracy, KernelShare
from kbench.results.findings import Finding, FindingCode
from kbench.wire.jobs import Judging

_where, _isfinite = torch.where, torch.isfinite  # bound before any solution is imported


def guarded_attributes() -> list[tuple[str, Any, str]]:
    """Functions a solution could replace to fool timing or checks: (label, owner, attribute)."""
    return [
        ("torch.cuda.Event", torch.cuda, "Event"), ("torch.cuda.synchronize", torch.cuda, "synchronize"),
        ("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time"),
        ("time.perf_counter", time, "perf_counter"), ("time.time", time, "time"), ("time.monotonic", time, "monotonic"),
        ("torch.allclose", torch, "allclose"), ("torch.equal", torch, "equal"), ("torch.isclose", torch, "isclose"),
        ("torch.testing.assert_close", torch.testing, "assert_close"), ("torch.Tensor.__eq__", torch.Tensor, "__eq__"),
        ("torch.Tensor.sub", torch.Tensor, "sub"),
        # Not torch.manual_seed: torch's dynamo re-wraps it when first imported, and seeding uses _manual_seed.
    ]


def snapshot_attributes() -> dict[str, object]:  # label -> the object there now, compared by identity
    return {label: owner.__dict__.get(name, getattr(owner, name, None)) for label, owner, name in guarded_attributes()}


def replaced_attributes(before: Mapping[str, object]) -> list[str]:
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
FP64_HEADROOM = 0.9  # the float64 oracle runs only when its estimated memory fits in this share of what is free
FP64_OUTPUT_COPIES = 3  # float64 outputs alive at once in the oracle: the exact one, the model's last layer, a chunk's


def _twice(call: Callable[[list[Any]], Any], keep: Callable[[list[Any]], Any], make: Callable[[int], list[Any]],
           seed: int, device: str) -> tuple[Any, float]:
    """Two calls on the same input values, drawn afresh from `seed` each time (no copy of them is kept), each with the
    random number generators freshly seeded at random (a candidate's process never sees the judge's reseeding, so the
    reference must not either: a dropout in training mode varies from call to call in both); the first call's output
    (through `keep`, which must return outputs the second call does not overwrite) and the largest difference between
    the two."""
    inputs = make(seed)
    torch.seed()  # a fresh random state for each call: make() reseeded it, so a dropout would draw the same mask twice
    first = keep(inputs)
    synchronize(device)
    del inputs
    inputs = make(seed)
    torch.seed()
    second = call(inputs)
    synchronize(device)
    diff = 0.0 if comparison.identical(first, second) else comparison.max_abs_diff(first, second)
    return first, diff


def determinism(keep: Callable[[list[Any]], Any], call: Callable[[list[Any]], Any], reference: Any,
                make: Callable[[int], list[Any]], seed: int, device: str) -> tuple[Any, Any, Finding | None]:
    """The candidate twice and the reference twice on the same inputs. Returns the candidate's and the reference's
    first outputs (for the float64 oracle) and `[non_deterministic]` when the candidate varies far more than the
    reference does. `keep(inputs)` calls the candidate and returns outputs of the caller's own; `call(inputs)` may
    return outputs that the next call overwrites."""
    first, diff = _twice(call, keep, make, seed, device)
    ref_first, ref_diff = _twice(lambda x: reference(*x), lambda x: reference(*x), make, seed, device)
    if diff <= NONDETERMINISM_FACTOR * ref_diff:
        return first, ref_first, None
    return first, ref_first, (Finding(FindingCode.NON_DETERMINISTIC, "two calls on the same inputs differ by up to "
                              f"{diff:.3g} (the reference's two calls: {ref_diff:.3g}): a race, or randomness the "
                              "reference does not draw"))


def skipped(what: str, exc: BaseException) -> Finding:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return Finding(FindingCode.CHECK_SKIPPED, f"{what} could not run: {type(exc).__name__}: {str(exc)[:200]}")


def _tensor_bytes(values: Any) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def fp64_memory_estimate(reference: Any, inputs: list[Any], outputs: Any) -> int:
    """Bytes the float64 oracle needs beyond what is allocated: float64 copies of the model and the floating inputs,
    and float64 outputs (the exact one, the model's last layer, a chunk's working set)."""
    floating = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    model = _tensor_bytes(list(reference.parameters()) + list(reference.buffers()))
    outs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    numel = sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
    return 2 * (_tensor_bytes(floating) + model) + 8 * FP64_OUTPUT_COPIES * numel


def free_bytes(device: str) -> int | None:
    """Memory this process can still allocate on `device` (free on the GPU plus its allocator's unused cache)."""
    if device != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info()
    return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())


def fp64_no_room(what: str, reference: Any, inputs: list[Any], outputs: Any, device: str) -> Finding | None:
    """`[check_skipped]` for `what` when a float64 run of the reference would not fit in the free memory, else None."""
    need, free = fp64_memory_estimate(reference, inputs, outputs), free_bytes(device)
    if free is None or need <= FP64_HEADROOM * free:
        return None
    return Finding(FindingCode.CHECK_SKIPPED,
                   f"{what} needs about {need / 1e9:.1f} GB and {free / 1e9:.1f} GB is free on the GPU")


def float64_run(reference: Any, inputs: list[Any], device: str) -> tuple[Any, Any]:
    """A float64 copy of the reference and its output on float64 copies of the floating inputs."""
    ref64 = copy.deepcopy(reference).double()
    exact = ref64(*[_double(x) for x in inputs])
    synchronize(device)
    return ref64, exact


def accuracy(reference: Any, inputs: list[Any], candidate_out: Any, ref_out: Any, device: str, tf32: bool,
             draft: Draft) -> None:
    """The float64 oracle, run only when it fits in the free memory: `draft.accuracy` and `[low_accuracy]`, or
    `[check_skipped]` with the reason. Never a failure of the solution's."""
    if (no_room := fp64_no_room("float64 accuracy", reference, inputs, ref_out, device)) is not None:
        draft.warnings.append(no_room)
        return
    try:
        acc = accuracy_against_fp64(reference, inputs, candidate_out, ref_out, device, tf32)
    except Exception as exc:  # noqa: BLE001 - a harness check: out of memory (rough estimate), a model without fp64
        draft.warnings.append(skipped("float64 accuracy", exc))
        return
    draft.row = dataclasses.replace(draft.row, accuracy=Accuracy(**acc))
    warning = accuracy_warning(acc)
    if warning:
        draft.warnings.append(warning)


def wants_kernel_profile(job: Judging) -> bool:
    """The own-kernel share needs CUDA's profiler; a run may skip it (`--no-kernel-profile`) for throughput."""
    return job.device == "cuda" and job.kernel_profile


def kernel_profile(kernel_share: Callable[[], object], draft: Draft) -> None:
    """The row's `kernels` from the candidate's profile, `[no_custom_kernel]` when none of its GPU time is its own."""
    try:
        share = decode(KernelShare, kernel_share())  # the candidate's figures: checked field by field
    except Exception as exc:  # noqa: BLE001 - the profiler is a harness check: if it cannot run, say so and go on
        draft.warnings.append(skipped("kernel profile", exc))
        return
    draft.row = dataclasses.replace(draft.row, kernels=share)
    if share.own_s == 0:
        draft.warnings.append(Finding(FindingCode.NO_CUSTOM_KERNEL,
                                      "none of the GPU time is spent in the solution's own kernels"))


def no_declared_kernels(draft: Draft) -> None:
    """A source that declares no __global__ kernel: the profile could attribute none of its GPU time to it, so it is
    not run (the static check `no_custom_kernel` speaks for a source with no kernel of any kind)."""
    draft.row = dataclasses.replace(draft.row, kernels=KernelShare(
        profiled=False, reason="the source declares no kernel (CUDA __global__, Triton, TileLang or CuTe DSL)"))


def accuracy_warning(acc: dict[str, float]) -> Finding | None:
    """The [low_accuracy] flag: far less accurate than the reference, and than TF32 where the run allows it."""
    allowed = ACCURACY_FLAG_FACTOR * acc["reference"]
    if "tf32" in acc:
        allowed = max(allowed, TF32_SLACK * acc["tf32"])
    if acc["solution"] <= ACCURACY_FLOOR or acc["solution"] <= allowed:
        return None
    tf32 = f" and {TF32_SLACK:g}x what TF32 rounding costs ({acc['tf32']:.3g})" if "tf32" in acc else ""
    return (Finding(FindingCode.LOW_ACCURACY, f"max error vs float64 {acc['solution']:.3g} is over "
            f"{ACCURACY_FLAG_FACTOR:g}x the reference's own {acc['reference']:.3g}{tf32} (reduced precision inside?)"))


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32's 10 mantissa bits (to nearest, ties away), as float32."""
    bits = t.float().contiguous().view(torch.int32)
    half = 1 << (TF32_MANTISSA_DROP - 1)
    rounded = (bits + half) & ~((1 << TF32_MANTISSA_DROP) - 1)
    return _where(_isfinite(t.float()), rounded.view(torch.float32), t.float())


def accuracy_against_fp64(reference: Any, inputs: list[Any], candidate_out: Any, ref_out: Any, device: str,
                          tf32: bool = False) -> dict[str, float]:
    """Max abs error against the reference run in float64: of the reference as run (`ref_out`, its output on
    `inputs`), of the solution and, with tf32, of the float64 reference fed TF32-rounded inputs and parameters (what
    TF32 arithmetic must cost). Each float64 copy is freed as soon as it is used; comparisons go a chunk at a time."""
    ref64, exact = float64_run(reference, inputs, device)
    errors = {"reference": comparison.max_abs_diff(ref_out, exact),
              "solution": comparison.max_abs_diff(candidate_out, exact)}
    if tf32:
        with torch.no_grad():
            for p in list(ref64.parameters()) + list(ref64.buffers()):
                if p.is_floating_point():
                    p.copy_(round_to_tf32(p).double())
        rounded = ref64(*[round_to_tf32(x).double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                          for x in inputs])
        errors["tf32"] = comparison.max_abs_diff(rounded, exact)
        synchronize(device)
        del rounded
    del ref64, exact
    return errors


def _double(x: Any) -> Any:
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def own_kernel_share(call: Any, arg_sets: list[list[Any]], source: str) -> OwnKernelShare:
    """GPU time in the solution's own kernels (those its source declares: kbench.judge.checks.kernel_names) vs library
    kernels, over one call(*args) per entry of arg_sets and nothing else: inputs are prepared before the profile
    starts."""
    kernels = kernel_names.declared(source)
    calls = len(arg_sets)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for args in arg_sets:
            call(*args)
        torch.cuda.synchronize()
    own = library = 0.0
    top: dict[str, float] = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        us = float(getattr(event, "device_time", 0.0) or getattr(event, "cuda_time", 0.0))
        kernel = event.name
        own, library = (own + us, library) if kernel_names.is_own(kernel, kernels) else (own, library + us)
        top[kernel[:80]] = top.get(kernel[:80], 0.0) + us
    total = own + library
    return {
        "own_s": own / 1e6 / calls, "library_s": library / 1e6 / calls,
        "own_share": own / total if total else 0.0, "kernels_declared": sorted({k.name for k in kernels}),
        "top": sorted(top.items(), key=lambda kv: -kv[1])[:5],
    }
