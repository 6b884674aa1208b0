"""The machine a run sees: the worker's probe, the device and size it resolves to, and where solutions compile."""

from __future__ import annotations

from pathlib import Path

from kbench.build.compile import BuildContext, zygote_env
from kbench.errors import KbenchError, UsageError
from kbench.execution import isolation
from kbench.execution.child import answer
from kbench.execution.zygote import Zygote
from kbench.results.header import Environment
from kbench.system import toolkit
from kbench.wire.jobs import OK, ProbeJob, ProbeResult

PROBE_TIMEOUT_S = 120


def probe_environment(zygote: Zygote | None = None) -> Environment:
    """The machine as a worker sees it (torch, GPUs); from a worker forked by `zygote` when one is given."""
    env = zygote_env(toolkit.find_cuda_home()) if zygote is not None else isolation.worker_path_env()
    outcome = isolation.run_forked(zygote, ProbeJob(), PROBE_TIMEOUT_S, env)
    result = answer(outcome, ProbeResult)
    if result.status != OK or result.environment is None:
        raise KbenchError(f"Cannot start a kbench worker ({result.status}: {result.message}). "
                          "Is torch installed in this Python?")
    return result.environment


def resolve_device(requested: str, env: Environment) -> str:
    if requested not in ("auto", "cuda", "cpu"):
        raise UsageError(f"Unknown device '{requested}'. Use auto, cuda or cpu.")
    if requested == "cuda" and not env.get("gpu"):
        raise UsageError("--device cuda was asked for, but torch sees no GPU here. Use --device cpu or auto.")
    if requested == "auto":
        return "cuda" if env.get("gpu") else "cpu"
    return requested


def resolve_size(requested: str | None, device: str) -> str:
    size = requested or ("full" if device == "cuda" else "small")
    if size not in ("full", "small"):
        raise UsageError(f"Unknown size '{size}'. Use full or small.")
    return size


def build_context(env: Environment, cache_dir: Path | None, timeout_s: float, jobs: int) -> BuildContext:
    """Where and how solutions compile on this machine: toolkit, arch list (from the GPU), cache."""
    gpu = env.get("gpu")
    arch = toolkit.arch_list((gpu["capability"][0], gpu["capability"][1]) if gpu else None)  # [major, minor]
    return BuildContext(cache_dir or toolkit.default_cache_dir(), toolkit.find_cuda_home(), arch, env["torch"],
                        timeout_s, jobs)
