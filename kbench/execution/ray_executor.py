"""Evaluation children as Ray tasks: one GPU each (Ray pins it), the problem and solution files shipped along.

kbench must be installed on every node (`pip install 'kbench[ray]'`), with the same torch as the driver: the
environment recorded in run.json is the driver's. Each node builds extensions into its own cache on first use.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from kbench.errors import UsageError
from kbench.execution import isolation
from kbench.execution.child import ChildOutcome
from kbench.execution.executor import Executor
from kbench.system import toolkit
from kbench.wire.jobs import Job

# Only these of the driver's variables travel with a task; the rest of a node's environment is its own.
FORWARDED_ENV = ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "PYTHONUNBUFFERED")
SHIPPED = ("problem", "solution")


def run_remote(job: Job, timeout_s: float, env_updates: dict[str, str],
               files: dict[str, tuple[str, bytes]]) -> ChildOutcome:
    """Runs on a Ray worker: write the shipped files, point the job at them, run the child as usual."""
    workdir = Path(tempfile.mkdtemp(prefix="kbench-ray-"))
    try:
        for section, (name, data) in files.items():
            path = workdir / section / name
            path.parent.mkdir(parents=True)
            path.write_bytes(data)
            job = dataclasses.replace(job, **{section: dataclasses.replace(getattr(job, section), path=str(path))})
        env = {**isolation.worker_path_env(), **env_updates}
        cuda_home = toolkit.find_cuda_home()
        if cuda_home is not None:
            env["CUDA_HOME"] = str(cuda_home)
        return isolation.run_child(job, timeout_s, env)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class RayLauncher:
    def __init__(self, device: str, address: str | None) -> None:
        import ray  # optional (the ray extra) and heavy: only --executor ray imports it

        self._ray = ray
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(max_retries=0, num_gpus=1) if device == "cuda" else ray.remote(max_retries=0, num_cpus=1)
        self._task = remote(run_remote)

    def __call__(self, job: Job, timeout_s: float, env: dict[str, str]) -> ChildOutcome:
        refs = {s: getattr(job, s) for s in SHIPPED if hasattr(job, s)}
        files = {s: (Path(ref.path).name, Path(ref.path).read_bytes()) for s, ref in refs.items()}
        updates = {k: env[k] for k in FORWARDED_ENV if k in env}
        return self._ray.get(self._task.remote(job, timeout_s, updates, files))


def ray_executor(device: str, address: str | None, parallel: int | None) -> Executor:
    """As many evaluations at once as the cluster has GPUs (CUDA) or `parallel` allows (CPU: default 1)."""
    try:
        import ray  # noqa: F401 - optional (the ray extra): is it installed?
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'kbench[ray]'") from None
    launcher = RayLauncher(device, address)
    if device == "cuda":
        width = parallel or int(launcher._ray.cluster_resources().get("GPU", 0))
        if width < 1:
            raise UsageError("The Ray cluster has no GPUs; use --device cpu or add GPU nodes.")
    else:
        width = parallel or 1  # parallel CPU timings would disturb each other
    return Executor("ray", tuple(f"ray-{i}" for i in range(width)), launcher, pins=False)
