"""The judge's side of an evaluation, shared by its modes: the problem, the reference, inputs, timers, phases.

Nothing here imports a solution. Functions a solution could replace are bound when this module is imported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from kbench.config.run_config import MathFlags
from kbench.config.tolerances import PRECISIONS
from kbench.judge import backward
from kbench.judge.candidate.loading import import_path
from kbench.judge.timing import checks, sampling, timers
from kbench.judge.verdict import Verdict, short
from kbench.results.diagnostics import ReferenceOutput
from kbench.results.figures import Floor
from kbench.results.findings import Finding
from kbench.results.records import Measurement, SizeOverrides, Status
from kbench.wire.jobs import Judging, ProblemRef

_perf_counter = time.perf_counter
_manual_seed = torch.manual_seed
_synchronize = timers.synchronize
_tensor_type = torch.Tensor
_memory_allocated, _max_memory_allocated = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated
_reset_peak = torch.cuda.reset_peak_memory_stats


def set_sizes(module: ModuleType, values: SizeOverrides) -> None:
    """Give the problem module's size constants new values; get_inputs() reads them when called."""
    for name, value in values.items():
        setattr(module, name, tuple(value) if isinstance(value, list) else value)


def load_problem(ref: ProblemRef) -> ModuleType:
    """The problem file imported, its size constants set to the job's size."""
    module = import_path("kbench_problem", ref.path)
    set_sizes(module, ref.overrides)
    return module


def apply_math_flags(flags: MathFlags) -> None:
    torch.backends.cudnn.allow_tf32 = flags.cudnn_tf32
    torch.backends.cuda.matmul.allow_tf32 = flags.matmul_tf32


def dtype_of(precision: str) -> torch.dtype:
    """The torch dtype of a precision name (tolerances.PRECISIONS: fp32, fp16, bf16)."""
    return getattr(torch, PRECISIONS[precision])


def cast(x: Any, precision: str) -> Any:
    """A floating tensor (or a module's floating parameters and buffers) in `precision`, as KernelBench casts models
    and inputs for its --precision; anything else as it is. fp32 leaves everything untouched."""
    if precision == "fp32":
        return x
    if isinstance(x, _tensor_type):
        return x.to(dtype_of(precision)) if x.is_floating_point() else x
    return x.to(dtype_of(precision)) if isinstance(x, torch.nn.Module) else x


def construct(make: Callable[[], Any], seed: int, device: str, precision: str = "fp32") -> Any:
    """make() seeded, built on `device` (`_construct_on`), then cast to `precision` (see `cast`)."""
    return cast(_construct_on(make, seed, device), precision)


def _construct_on(make: Callable[[], Any], seed: int, device: str) -> Any:
    """make() seeded (as KernelBench seeds before a constructor), on `device`. On CUDA it runs with the GPU as the
    default device, so a model of gigabytes of weights initialises in milliseconds there rather than in seconds on
    the CPU (the judge hands its weights to the candidate's models, so both sides hold the same values either way);
    a constructor that cannot run that way runs again, seeded again, on the CPU and is moved."""
    if device != "cpu":
        _manual_seed(seed)
        try:
            with torch.device(device):
                return make().to(device)
        except Exception:  # noqa: BLE001 - e.g. numpy or an explicit CPU tensor inside the constructor
            pass
    _manual_seed(seed)
    return make().to(device)


def build_reference(problem: ModuleType, seed: int, device: str, precision: str = "fp32") -> tuple[Any, list[Any]]:
    """The reference model, seeded before its constructor, in `precision`, and the constructor's arguments."""
    init = list(problem.get_init_inputs())
    return construct(lambda: problem.Model(*init), seed, device, precision), init


def job_reference(problem: ModuleType, job: Judging) -> tuple[Any, list[Any], Callable[[int], list[Any]]]:
    """The job's reference (seeded with its seed, on its device, in its precision), the constructor's arguments, and
    the input maker for the same device and precision."""
    precision = job.precision
    reference, init = build_reference(problem, job.seed, job.device, precision)
    make = input_maker(problem, job.device, precision)
    if job.backward:  # forward and backward as one call, the upstream gradient drawn with the inputs
        return backward.Gradients(reference, reference=True), init, backward.with_upstream(make, reference)
    return reference, init, make


def _to(x: Any, device: str, precision: str = "fp32") -> Any:
    return cast(x.to(device), precision) if isinstance(x, _tensor_type) else x


def input_maker(problem: ModuleType, device: str, precision: str = "fp32") -> Callable[[int], list[Any]]:
    """make(seed) -> the problem's inputs on `device`. On CUDA, get_inputs() runs with the GPU as the default device,
    so multi-GB inputs are drawn there in milliseconds rather than on the CPU; a problem whose get_inputs() cannot
    run that way is drawn on the CPU and moved."""
    on_device = [device != "cpu"]

    def make(seed: int) -> list[Any]:
        _manual_seed(seed)
        if on_device[0]:
            try:
                with torch.device(device):
                    return [_to(x, device, precision) for x in problem.get_inputs()]
            except Exception:  # noqa: BLE001 - e.g. numpy inside get_inputs; draw on the CPU from now on
                on_device[0] = False
                _manual_seed(seed)
        return [_to(x, device, precision) for x in problem.get_inputs()]

    return make


def make_timer(device: str) -> sampling.Timer:
    return timers.CudaEventTimer(torch.device("cuda")) if device == "cuda" else timers.HostTimer()


def out_of_memory(exc: BaseException) -> bool:
    """A failure to allocate (GPU or host), as torch reports it."""
    text = str(exc)
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


def guarded(device: str, what: str, fn: Callable[[], Any], judge_work: str = "") -> Any:
    """Run fn, turning an exception (including an asynchronous CUDA fault) into a runtime_error of `what`.

    With `judge_work` (the judge's own work: inputs, the reference, comparisons), running out of memory is the
    harness's failure, never the solution's: `not_run` with `[check_skipped]` and the reason. A Verdict (the
    candidate's failures, reported by its process) passes through unchanged.
    """
    try:
        out = fn()
        _synchronize(device)
        return out
    except Verdict:
        raise
    except BaseException as exc:  # SystemExit from a solution is its failure too
        if judge_work and out_of_memory(exc):
            _free_cached(device)
            raise Verdict(Status.NOT_RUN, f"[check_skipped] {judge_work} could not run: the judge ran out of memory "
                                     f"({short(exc)}); the solution was not judged") from exc
        raise Verdict(Status.RUNTIME_ERROR, f"{what} raised {short(exc)}") from exc


def _free_cached(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def with_peak(device: str, fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """fn() and, on CUDA, the peak of memory it allocated beyond what was allocated before it (bytes)."""
    if device != "cuda":
        return fn(), None
    before = _memory_allocated()
    _reset_peak()
    out = fn()
    _synchronize(device)
    return out, max(_max_memory_allocated() - before, 0)


class Phases:
    """Wall seconds of each part of an evaluation since the last mark: where an evaluation's time goes."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = _perf_counter()

    def mark(self, name: str) -> None:
        """The seconds since the last mark go to `name` (added to what it has: a step done again adds up)."""
        now = _perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 4)
        self._last = now


def describe_output(out: Any) -> ReferenceOutput:
    """The first output's shape and dtype (a tensor), or its type's name."""
    first = out[0] if isinstance(out, (tuple, list)) else out
    if isinstance(first, _tensor_type):
        return ReferenceOutput(shape=tuple(first.shape), dtype=str(first.dtype))
    return ReferenceOutput(type=type(first).__name__)


def timed_findings(job: Judging, timing: Measurement | None, eager: Measurement | None,
                   floor: Floor | None) -> tuple[list[Finding], float | None]:
    """What a row's timing warns of (its samples: `checks.measurement_warnings`; below the problem's floor, or far ahead
    of `eager`: `roofline.floor_findings`) and its percent of the floor; the same for a solution's row (the judge) and
    the eager and torch.compile rows (the reference's child)."""
    found = checks.measurement_warnings(timing, job.timing, job.device)
    if timing is None or floor is None:
        return found, None
    from kbench.measure import roofline  # the FLOP counter's imports: paid ahead in the zygote (worker)

    found += roofline.floor_findings(timing.median, eager.median if eager else None, floor)
    return found, roofline.percent_of_floor(timing.median, floor)
