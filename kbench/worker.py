"""The child process: loads one problem (and one solution), builds, checks and times, reports one JSON.

Run as `python -m kbench.worker --result-fd N` with the job as JSON on stdin. The result goes to
the inherited pipe N, never to stdout, so nothing a solution prints can pass for a result. Every
harness function used to judge the solution (comparison, timers) is imported before the solution.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from kbench import correctness, timing, trust  # noqa: F401  (bound before user code; see their docstrings)
from kbench.records import MathFlags, TimingPolicy
from kbench.toolkit import BUILT_MARKER

_perf_counter = time.perf_counter
_MAX_MESSAGE = 4000
_announce: Any = lambda event: None  # main() points it at the result pipe: a progress event for the parent


class BuildFailed(Exception):
    """load_inline / load raised while the solution was being imported."""


class Verdict(Exception):
    """Ends the evaluation early with a status and a message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " ..."


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if "error" in line.lower() and "Error building extension" not in line:
            return line.strip()[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else "build failed"


def _import_path(module_name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _instrumented_import(path: str) -> tuple[ModuleType, list[float]]:
    """Import a solution, timing each extension build and telling build failures from other errors."""
    from torch.utils import cpp_extension

    build_seconds: list[float] = []
    originals = {name: getattr(cpp_extension, name) for name in ("load_inline", "load")}

    def wrap(original: Any) -> Any:
        def build(*args: Any, **kwargs: Any) -> Any:
            kwargs["verbose"] = True  # the compiler's output becomes the compile log
            start = _perf_counter()
            try:
                return original(*args, **kwargs)
            except Exception as exc:
                raise BuildFailed(str(exc)) from exc
            finally:
                build_seconds.append(_perf_counter() - start)

        return build

    for name, original in originals.items():
        setattr(cpp_extension, name, wrap(original))
    try:
        return _import_path("kbench_solution", path), build_seconds
    finally:
        for name, original in originals.items():
            setattr(cpp_extension, name, original)


def load_solution(path: str) -> tuple[ModuleType, dict[str, Any]]:
    start = _perf_counter()
    try:
        module, builds = _instrumented_import(path)
    except BuildFailed as exc:
        raise Verdict("compile_error", _first_error_line(str(exc))) from exc
    except SyntaxError as exc:
        raise Verdict("load_error", f"SyntaxError: {exc.msg} (line {exc.lineno})") from exc
    except BaseException as exc:  # noqa: BLE001 - a solution may raise anything, SystemExit included
        raise Verdict("load_error", f"importing the solution raised {_short(exc)}") from exc
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise Verdict("load_error", "the solution does not define a class ModelNew")
    info = {"seconds": _perf_counter() - start, "build_seconds": builds}
    return module, info


def set_sizes(module: ModuleType, values: dict[str, Any]) -> None:
    """Give the problem module's size constants new values; get_inputs() reads them when called."""
    for name, value in values.items():
        setattr(module, name, tuple(value) if isinstance(value, list) else value)


def load_problem(job: dict[str, Any]) -> ModuleType:
    problem = job["problem"]
    module = _import_path("kbench_problem", problem["path"])
    set_sizes(module, problem.get("overrides", {}))
    return module


def apply_math_flags(flags: MathFlags) -> None:
    torch.backends.cudnn.allow_tf32 = flags.cudnn_tf32
    torch.backends.cuda.matmul.allow_tf32 = flags.matmul_tf32


def _to(x: Any, device: str) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


_manual_seed = torch.manual_seed
_synchronize = timing.synchronize


def build_models(problem: ModuleType, solution: ModuleType | None, seed: int, device: str) -> tuple[Any, Any, int]:
    """Seed before each constructor (as KernelBench does), then copy matching reference weights."""
    init = problem.get_init_inputs()
    _manual_seed(seed)
    reference = problem.Model(*init).to(device)
    if solution is None:
        return reference, None, 0
    _manual_seed(seed)
    try:
        candidate = solution.ModelNew(*init).to(device)
    except Exception as exc:
        raise Verdict("runtime_error", f"ModelNew(*get_init_inputs()) raised {_short(exc)}") from exc
    ref_state, new_state = reference.state_dict(), candidate.state_dict()
    shared = {k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape}
    candidate.load_state_dict(shared, strict=False)
    return reference, candidate, len(shared)


def input_maker(problem: ModuleType, device: str):
    def make(seed: int) -> list[Any]:
        _manual_seed(seed)
        return [_to(x, device) for x in problem.get_inputs()]

    return make


def make_timer(device: str) -> timing.Timer:
    return timing.CudaEventTimer(torch.device("cuda")) if device == "cuda" else timing.HostTimer()


def _guarded(device: str, what: str, fn: Any) -> Any:
    """Run fn, turning an exception (including an asynchronous CUDA fault) into a runtime_error."""
    try:
        out = fn()
        _synchronize(device)
        return out
    except Verdict:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a solution is its failure too
        raise Verdict("runtime_error", f"{what} raised {_short(exc)}") from exc


class Phases:
    """Wall seconds of each part of an evaluation since the last mark: where an evaluation's time goes."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = _perf_counter()

    def mark(self, name: str) -> None:
        now = _perf_counter()
        self.seconds[name] = round(now - self._last, 4)
        self._last = now


def evaluate(job: dict[str, Any]) -> dict[str, Any]:
    device, seed = job["device"], job["seed"]
    phases = Phases()
    policy = TimingPolicy(**job["timing"])
    apply_math_flags(MathFlags(**job["math"]))
    problem = load_problem(job)
    guarded = trust.snapshot_attributes()
    solution, compile_info = load_solution(job["solution"]["path"])
    result: dict[str, Any] = {"compile": compile_info, "warnings": []}
    with torch.no_grad():
        reference, candidate, copied = build_models(problem, solution, seed, device)
        result["extra"] = {"state_dict_tensors_copied": copied, "phases": phases.seconds}
        phases.mark("load")
        make = input_maker(problem, device)
        seeds = [seed + 1 + i for i in range(job["trials"])]
        trials, warnings = _guarded(
            device,
            "the solution",
            lambda: correctness.run_trials(make, candidate, reference, seeds, job["atol"], job["rtol"],
                                           sync=lambda: _synchronize(device)),
        )
        result["trials"] = [t.__dict__ for t in trials]
        result["warnings"] += warnings
        phases.mark("trials")
        if not all(t.passed for t in trials):
            return {**result, "status": "incorrect", "message": trials[-1].message}
        failure = check_other_sizes(job, problem, solution, result)
        phases.mark("other_sizes")
        if failure:
            return {**result, "status": "incorrect", "message": failure}
        set_sizes(problem, job["problem"].get("overrides", {}))
        inputs = make(seed)
        cand_in, ref_in = correctness.clone_inputs(inputs), correctness.clone_inputs(inputs)
        fns = {"solution": lambda: candidate(*cand_in), "eager": lambda: reference(*ref_in)}
        measured = _guarded(device, "timing", lambda: timing.measure_interleaved(fns, make_timer(device), policy))
        result["timing"] = measured["solution"].to_json()
        result["eager_timing"] = measured["eager"].to_json()
        phases.mark("timing")
        _announce("timed")  # the parent may now start the next child (kbench.isolation.WarmStarts)
        _guarded(device, "the solution", lambda: trust.trust_checks(job, reference, candidate, make, result, phases.mark))
    patched = trust.replaced_attributes(guarded)
    if patched:
        result["warnings"].append(f"[monkey_patch] the solution replaced {', '.join(patched)} (timing and checks use the originals)")
    return {**result, "status": "correct", "message": ""}


def check_other_sizes(job: dict[str, Any], problem: ModuleType, solution: ModuleType, result: dict[str, Any]) -> str:
    """Correctness trials at each further size (fresh models and inputs); a message on the first failure.

    A solution that hard-codes the sizes it was written for passes at one size and fails at another.
    """
    device, seed = job["device"], job["seed"]
    result["size_checks"] = {}
    for other in job.get("other_sizes", []):
        set_sizes(problem, other["overrides"])
        reference, candidate, _ = build_models(problem, solution, seed, device)
        make = input_maker(problem, device)
        seeds = [seed + 101 + i for i in range(job["trials"])]
        trials, _ = _guarded(
            device,
            f"the solution at size {other['name']}",
            lambda: correctness.run_trials(make, candidate, reference, seeds, job["atol"], job["rtol"],
                                           sync=lambda: _synchronize(device)),
        )
        result["size_checks"][other["name"]] = [t.__dict__ for t in trials]
        del reference, candidate
        if not all(t.passed for t in trials):
            return f"at size {other['name']}: {trials[-1].message}"
    return ""


def evaluate_reference(job: dict[str, Any]) -> dict[str, Any]:
    """The eager reference timed (and, if asked, torch.compile of it, checked against eager and timed)."""
    device, seed = job["device"], job["seed"]
    policy = TimingPolicy(**job["timing"])
    apply_math_flags(MathFlags(**job["math"]))
    problem = load_problem(job)
    with torch.no_grad():
        reference, _, _ = build_models(problem, None, seed, device)
        make = input_maker(problem, device)
        inputs = make(seed)
        out = _guarded(device, "the reference", lambda: reference(*correctness.clone_inputs(inputs)))
        other = _guarded(device, "the reference", lambda: reference(*make(seed + 1)))
        try:
            findings, figures = correctness.degenerate_findings(out, other, job["atol"], job["rtol"])
        except Exception as exc:  # a harness check, e.g. float64 copies of a huge output out of memory
            findings, figures = [f"[check_skipped] degenerate check could not run: {type(exc).__name__}: {str(exc)[:200]}"], {}
        result: dict[str, Any] = {"status": "correct", "message": "", "output": {**_describe(out), **figures},
                                  "warnings": findings}
        del other
        fns = {"eager": lambda: reference(*correctness.clone_inputs(inputs))}
        compiled: dict[str, Any] | None = None
        if job.get("compile_baseline"):
            compiled = _check_compiled(job, reference, make, device)
            if compiled["status"] == "correct":
                model = compiled.pop("model")
                fns["compiled"] = lambda: model(*correctness.clone_inputs(inputs))
        measured = _guarded(device, "timing", lambda: timing.measure_interleaved(fns, make_timer(device), policy))
        _announce("timed")
    result["timing"] = measured["eager"].to_json()
    if device == "cuda" and job.get("ceilings_dir"):
        result["floor"] = hardware_floor(job, reference, inputs)
    if compiled is not None:
        if "compiled" in measured:
            compiled["timing"] = measured["compiled"].to_json()
            compiled["eager_timing"] = result["timing"]
        result["compiled"] = compiled
    return result


def check_problem(job: dict[str, Any]) -> dict[str, Any]:
    """Can this problem tell right from wrong at its tolerance? (reference outputs for two input seeds)"""
    device, seed = job["device"], job["seed"]
    apply_math_flags(MathFlags(**job["math"]))
    problem = load_problem(job)
    with torch.no_grad():
        reference, _, _ = build_models(problem, None, seed, device)
        make = input_maker(problem, device)
        first = _guarded(device, "the reference", lambda: reference(*make(seed + 1)))
        second = _guarded(device, "the reference", lambda: reference(*make(seed + 2)))
        findings, figures = correctness.degenerate_findings(first, second, job["atol"], job["rtol"])
    return {"status": "correct", "message": "", "findings": findings, "figures": {**figures, **_describe(first)}}


def hardware_floor(job: dict[str, Any], reference: Any, inputs: list[Any]) -> dict[str, Any]:
    """The problem's floor on this GPU: minimal bytes over measured bandwidth, FLOPs over measured peak."""
    from kbench import roofline

    flags = MathFlags(**job["math"])
    work = roofline.problem_work(reference, inputs, device="meta")
    ceilings = roofline.cached_ceilings(Path(job["ceilings_dir"]), torch.device("cuda"), flags.allows_tf32)
    return roofline.floor_to_json(roofline.floor(work, ceilings))


def _check_compiled(job: dict[str, Any], reference: Any, make: Any, device: str) -> dict[str, Any]:
    start = _perf_counter()
    model = torch.compile(reference)
    seeds = [job["seed"] + 1 + i for i in range(job["trials"])]
    try:
        trials, _ = correctness.run_trials(make, model, reference, seeds, job["atol"], job["rtol"],
                                           sync=lambda: _synchronize(device))
        _synchronize(device)
    except Exception as exc:  # inductor needs a working compiler toolchain; report, don't fail the problem
        return {"status": "runtime_error", "message": f"torch.compile raised {_short(exc)}"}
    info = {"trials": [t.__dict__ for t in trials], "compile": {"seconds": _perf_counter() - start}}
    if not all(t.passed for t in trials):
        return {**info, "status": "incorrect", "message": trials[-1].message}
    return {**info, "status": "correct", "message": "", "model": model}


def _describe(out: Any) -> dict[str, Any]:
    first = out[0] if isinstance(out, (tuple, list)) else out
    if isinstance(first, torch.Tensor):
        return {"shape": list(first.shape), "dtype": str(first.dtype)}
    return {"type": type(first).__name__}


def build(job: dict[str, Any]) -> dict[str, Any]:
    """Import the solution once so its extensions compile into the cache; run nothing."""
    _, info = load_solution(job["solution"]["path"])
    Path(os.environ["TORCH_EXTENSIONS_DIR"], BUILT_MARKER).touch()
    return {"status": "ok", "message": "", "compile": info}


def probe(job: dict[str, Any]) -> dict[str, Any]:
    from kbench.environment import describe_torch

    return {"status": "ok", "environment": describe_torch()}


MODES = {"evaluate": evaluate, "reference": evaluate_reference, "build": build, "probe": probe, "check": check_problem}


def main() -> None:
    parser = argparse.ArgumentParser(description="kbench evaluation child (internal)")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--warm", action="store_true", help="started ahead of its job: import what evaluations use first")
    args = parser.parse_args()
    if args.warm:
        import torch.profiler  # noqa: F401  (the kernel-share check)
        import torch.utils.cpp_extension  # noqa: F401  (what solutions load their kernels with)
    job = json.loads(sys.stdin.read())
    os.environ.update(job.get("env", {}))  # what differs between jobs (kbench.isolation.JOB_ENV)
    out = os.fdopen(args.result_fd, "w")

    def announce(event: str) -> None:
        out.write(json.dumps({"token": job["token"], "event": event}) + "\n")
        out.flush()

    global _announce
    _announce = announce
    try:
        result = MODES[job["mode"]](job)
    except Verdict as v:
        result = {"status": v.status, "message": v.message}
    except BaseException as exc:  # noqa: BLE001 - any failure must still produce one result
        traceback.print_exc()
        result = {"status": "runtime_error", "message": f"harness error: {_short(exc)}"}
    sys.stdout.flush()
    sys.stderr.flush()
    out.write(json.dumps({"token": job["token"], "result": result}, default=str) + "\n")
    out.flush()
    # Skip interpreter teardown: a solution's atexit hooks or threads must not hang or alter the exit.
    os._exit(0)


if __name__ == "__main__":
    main()
