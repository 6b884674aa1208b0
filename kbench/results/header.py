"""The shapes of what a run records about itself besides its evaluations: the machine, the code, the selection and
each problem's settings (run.json's header). TypedDicts, as they stay plain JSON objects in the file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# typing_extensions' TypedDict (pydantic's own dependency): pydantic checks one on the pipe (the probe's Environment)
# only in that form before Python 3.12
from typing_extensions import TypedDict

from kbench.results.codec import JsonObject


class _GpuNames(TypedDict, total=False):
    """What newer probes record of every visible GPU (absent in older files)."""

    names: list[str]  # every visible GPU's model, in torch's order


class GpuInfo(_GpuNames):
    """The first visible GPU as torch sees it (kbench.system.environment.describe_torch)."""

    name: str
    capability: list[int]  # [major, minor]
    memory_bytes: int
    sm_count: int
    l2_bytes: int
    count: int  # GPUs visible to torch


class _CudaInfo(TypedDict, total=False):
    """What a probe records only where CUDA is available."""

    cudnn: int | None
    driver: str | None  # nvidia-smi's driver version; None where it cannot be read


class Environment(_CudaInfo):
    """The machine as a worker's probe sees it: kbench, torch, Python, the CPU and the GPU (None without one)."""

    kbench: str
    torch: str
    cuda_runtime: str | None
    python: str
    cpu: str
    cpu_count: int | None
    cpu_threads: int
    gpu: GpuInfo | None


class HostInfo(TypedDict):
    hostname: str
    platform: str


class GitInfo(TypedDict):
    """The repository's commit and whether its tree was dirty (None where git cannot tell)."""

    commit: str | None
    dirty: bool | None


class Selection(TypedDict):
    """What a run was asked for (kbench.commands.run.what_to_run): a resume finishes the same."""

    problems: list[str]  # names, or absolute paths
    solutions: list[str]  # names, or absolute paths (-s, repeatable); empty: every solution of each problem
    problems_dir: str
    solutions_dir: str


def selected_solutions(selection: Mapping[str, Any]) -> list[str]:
    """The solutions a run file's selection names: its `solutions` (a file written before -s could repeat has one
    `solution`, or null for all)."""
    if "solutions" in selection:
        return list(selection["solutions"] or [])
    return [selection["solution"]] if selection.get("solution") else []


class ProblemRecord(TypedDict):
    """One problem's settings in a run: where it came from and the tolerance, precision and sizes its rows used."""

    origin: str
    path: str
    atol: float
    rtol: float
    precision: str
    problem_atol: float
    problem_rtol: float
    constants: dict[str, object]  # module-level size constants: Python literals read from the AST
    overrides: dict[str, object]  # the constants this run's size sets


class RunHeader(TypedDict, total=False):
    """run.json's header, written before the first evaluation (kbench.commands.execute) and read back by a resume.
    Not every file has every key (older versions, tests' own headers)."""

    format: str
    version: int
    run_id: str
    started: str
    process: dict[str, object]  # kbench.results.storage.RunProcess, as dataclasses.asdict writes it
    # The probe's Environment with the toolkit and the host; a plain object as kbench.commands.baseline reads it.
    environment: JsonObject
    git: GitInfo
    config: JsonObject  # RunConfig as dataclasses.asdict writes it, with the device and size the run resolved
    selection: Selection | None
    problems: dict[str, ProblemRecord]
