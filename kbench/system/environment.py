"""What a result was measured on: GPU, driver, CUDA, cuDNN, torch, Python, CPU, and the repo's commit."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from kbench import __version__
from kbench.results.header import Environment, GitInfo, HostInfo

GIT_TIMEOUT_S = 5


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def describe_torch() -> Environment:
    """Called inside a child process (worker probe), so the parent never initializes CUDA."""
    import torch  # heavy: only the worker's probe imports torch here, never the parent

    info: Environment = {
        "kbench": __version__,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_threads": torch.get_num_threads(),
        "gpu": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = {
            "name": props.name,
            "capability": [props.major, props.minor],
            "memory_bytes": props.total_memory,
            "sm_count": props.multi_processor_count,
            "l2_bytes": props.L2_cache_size,
            "count": torch.cuda.device_count(),
            "names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        }
        info["cudnn"] = torch.backends.cudnn.version()
        info["driver"] = _driver_version()
    return info


def git_info(repo: Path) -> GitInfo:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def host_info() -> HostInfo:
    return {"hostname": platform.node(), "platform": platform.platform()}
