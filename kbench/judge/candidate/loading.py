"""Importing a solution file: extension builds timed and told apart from other import errors.

Used by the candidate's process (the only one that imports solutions) and by the build child.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kbench.judge.verdict import NO_MODELNEW, Verdict, short, syntax_error
from kbench.results.records import Status
from kbench.system.toolkit import first_compiler_error

_perf_counter = time.perf_counter


class BuildFailed(Exception):
    """load_inline / load raised while the solution was being imported."""


def first_error_line(text: str) -> str:
    """The compiler log's first error (the line a person looks for first), else its first line."""
    found = first_compiler_error(text)
    if found is not None:
        return found
    return text.strip().splitlines()[0][:300] if text.strip() else "build failed"


def import_path(module_name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _instrumented_import(path: str) -> tuple[ModuleType, list[float]]:
    """Import a solution, timing each extension build and telling build failures from other errors."""
    from torch.utils import cpp_extension  # heavy: torch and setuptools; only a solution's import needs them

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
        return import_path("kbench_solution", path), build_seconds
    finally:
        for name, original in originals.items():
            setattr(cpp_extension, name, original)


# Kernel DSLs a solution may import, by top-level module: (what it is, kbench's optional extra that installs it).
BACKENDS = {"triton": ("Triton", "triton"), "cutlass": ("CuTe DSL (nvidia-cutlass-dsl)", "cute"),
            "tilelang": ("TileLang", "tilelang")}


def _backend_message(module: str) -> str:
    what, extra = BACKENDS[module]
    return (f"the solution is written in {what}, which is not installed in this Python (pip install "
            f"'kbench[{extra}]' on a machine where it installs)")


def missing_backend(exc: BaseException) -> str | None:
    """The message for a solution whose kernel DSL is not installed here, else None."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".")[0]
    return _backend_message(module) if module in BACKENDS else None


def not_installed(message: str) -> bool:
    """Whether a load_error's message is `missing_backend`'s for a kernel DSL that this Python lacks too: checked by
    kbench's own process (find_spec imports nothing), never taken from the process that imported the solution."""
    return any(message == _backend_message(m) and _absent(m) for m in BACKENDS)


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a module entry without a spec: something is there
        return False


def load_failure(v: Verdict) -> Verdict:
    """A failed import as a result: a solution whose kernel DSL is not installed here is `not_run` (this machine
    cannot run it, as a CUDA solution without a GPU), with the message naming the extra; any other stays as it is."""
    if v.status == Status.LOAD_ERROR and not_installed(v.message):
        return Verdict(Status.NOT_RUN, v.message)
    return v


@dataclass(frozen=True)
class Loaded:
    """How long importing the solution took, and each extension build within it (seconds)."""

    seconds: float
    build_seconds: tuple[float, ...] = ()


def load_solution(path: str) -> tuple[ModuleType, Loaded]:
    """The solution module and how long it took; a Verdict (compile_error, load_error) when it cannot load
    (`load_failure` turns the load_error of a kernel DSL missing here into not_run)."""
    start = _perf_counter()
    try:
        module, builds = _instrumented_import(path)
    except BuildFailed as exc:
        raise Verdict(Status.COMPILE_ERROR, first_error_line(str(exc))) from exc
    except SyntaxError as exc:
        raise Verdict(Status.LOAD_ERROR, syntax_error(exc)) from exc
    except BaseException as exc:  # a solution may raise anything, SystemExit included
        raise Verdict(Status.LOAD_ERROR, missing_backend(exc) or f"importing the solution raised {short(exc)}") from exc
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise Verdict(Status.LOAD_ERROR, NO_MODELNEW)
    return module, Loaded(_perf_counter() - start, tuple(builds))
