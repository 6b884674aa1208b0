"""The build environment: find the CUDA toolkit, pick the arch list, key the extension cache."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

BUILT_MARKER = ".kbench-built"
DEFAULT_ARCH = "9.0"  # Hopper; used only when no GPU is visible and TORCH_CUDA_ARCH_LIST is unset
CACHE_FORMAT = "1"


def _is_toolkit(root: Path) -> bool:
    has_nvcc = (root / "bin" / "nvcc").is_file()
    headers = [root / "include" / "cuda_runtime.h", *root.glob("targets/*/include/cuda_runtime.h")]
    return has_nvcc and any(h.is_file() for h in headers)


def find_cuda_home() -> Path | None:
    """The CUDA toolkit root: $CUDA_HOME / $CUDA_PATH, /usr/local/cuda*, or nvcc's real location.

    torch guesses the root from `which nvcc`, which is wrong when nvcc is a wrapper script in
    /usr/local/bin; a candidate counts only if it has both bin/nvcc and cuda_runtime.h.
    """
    candidates: list[Path] = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda"))
    candidates += sorted(Path("/usr/local").glob("cuda-*"), reverse=True)
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent)
    for root in candidates:
        if _is_toolkit(root):
            return root
    return None


def arch_list(gpu_capability: tuple[int, int] | None) -> str:
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if gpu_capability:
        return f"{gpu_capability[0]}.{gpu_capability[1]}"
    return DEFAULT_ARCH


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kbench" / "extensions"


def cache_key(source: bytes, torch_version: str, arch: str) -> str:
    """Builds are keyed by everything that changes the binary: source, torch, arch list, Python."""
    digest = hashlib.sha256()
    for part in (CACHE_FORMAT, torch_version, arch, sys.version.split()[0]):
        digest.update(part.encode() + b"\0")
    digest.update(source)
    return digest.hexdigest()[:20]


def build_env(extensions_dir: Path | None, cuda_home: Path | None, arch: str, max_jobs: int) -> dict[str, str]:
    """Variables for a child that may compile: its own extension dir (None: none), the toolkit, the arch list."""
    env: dict[str, str] = {}
    if extensions_dir is not None:
        env["TORCH_EXTENSIONS_DIR"] = str(extensions_dir)
    env["TORCH_CUDA_ARCH_LIST"] = arch
    env["MAX_JOBS"] = str(max(1, max_jobs))
    env["PYTHONUNBUFFERED"] = "1"
    if cuda_home is not None:
        env["CUDA_HOME"] = str(cuda_home)
    return env


_COMPILER_ERROR = re.compile(r"(?:^|\s)(?:fatal )?error\b\s*:?", re.IGNORECASE)


def first_compiler_error(log: str) -> str | None:
    """The first line of compiler output that reports an error, with its file's folder dropped."""
    for line in log.splitlines():
        if _COMPILER_ERROR.search(line) and "Error building extension" not in line and not line.startswith("FAILED:"):
            head, sep, tail = line.partition(": ")
            return (Path(head).name + sep + tail if sep and "/" in head else line).strip()[:300]
    return None
