"""Evaluation children on a Ray cluster: one slot actor per GPU (Ray pins it), each forking its children warm.

Each slot of a `--executor ray` run is a Ray actor holding one GPU (CUDA) or one CPU. The actor keeps the local
executor's warm starts (kbench.execution.warm_starts.WarmStarts: a zygote that imported torch and kbench once, the
slot's next worker and candidate started ahead on CUDA), so an evaluation on a Ray slot starts as fast as a local
one; a task per evaluation would pay a fresh interpreter's imports every time. The problem and solution files travel
with each job. kbench must be installed on every node (`pip install 'kbench[ray]'`), with the same torch as the
driver: the environment recorded in run.json is the driver's. Each node builds extensions into its own cache on
first use.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

from kbench.errors import ClusterError, UsageError
from kbench.execution import isolation
from kbench.execution.child import ChildOutcome
from kbench.execution.executor import Executor
from kbench.execution.pool import Turn, current_turn, in_turn
from kbench.execution.warm_starts import WarmStarts
from kbench.system import toolkit
from kbench.wire.jobs import Job

# Only these of the driver's variables travel with a job; the rest of a node's environment is its own.
FORWARDED_ENV = ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "PYTHONUNBUFFERED")
SHIPPED = ("problem", "solution")
SLOT_ENV = "KBENCH_RAY_SLOT"  # which slot actor a job goes to (Executor.env sets it; the launcher takes it out)


class SlotInfo(TypedDict):
    """A Ray slot as it describes itself: its actor's process, the GPU Ray gave it (CUDA_VISIBLE_DEVICES), the jobs
    it ran and the zygotes its warm starts started."""

    pid: int
    gpu: str | None
    jobs: int
    zygotes: int


class SlotActor:
    """One Ray slot (made a Ray actor by `RayLauncher`): each job runs in a fresh worker that the slot's warm starts
    fork on the GPU Ray gave the actor. As on a local slot (kbench.execution.pool.Turn), the next job starts once the
    running one has timed (`start` returns then) and times nothing before the running one's worker has exited: the
    actor chains its jobs' turns itself. `start` hands a job in and returns at its release; `finish` returns its
    outcome."""

    def __init__(self, device: str) -> None:
        self.launch = WarmStarts(ahead=device == "cuda")
        self.jobs = 0
        self._ended = threading.Event()  # the last job's turn ended (its worker gone): the next one's `previous`
        self._ended.set()
        self._running: dict[str, Future[ChildOutcome]] = {}
        self._threads = ThreadPoolExecutor(max_workers=2)  # the running job and the next one
        self._lock = threading.Lock()

    def start(self, key: str, job: Job, timeout_s: float, env_updates: dict[str, str],
              files: dict[str, tuple[str, bytes]]) -> None:
        """Begin `job` (named `key`) after the slot's last; return once it has timed or ended."""
        released = threading.Event()
        with self._lock:
            turn = Turn(None, self._ended, lambda slot, ended: released.set())
            self._ended = turn.ended
            self._running[key] = self._threads.submit(
                in_turn, turn, lambda: self.run(job, timeout_s, env_updates, files))
        released.wait()

    def finish(self, key: str) -> ChildOutcome:
        """The outcome of the job `start` began as `key`."""
        with self._lock:
            running = self._running.pop(key)
        return running.result()

    def run(self, job: Job, timeout_s: float, env_updates: dict[str, str],
            files: dict[str, tuple[str, bytes]]) -> ChildOutcome:
        """Write the shipped files, point the job at them, run it in a fresh worker of this slot."""
        workdir = Path(tempfile.mkdtemp(prefix="kbench-ray-"))
        try:
            for section, (name, data) in files.items():
                path = workdir / section / name
                path.parent.mkdir(parents=True)
                path.write_bytes(data)
                job = dataclasses.replace(job, **{section: dataclasses.replace(getattr(job, section), path=str(path))})
            env = {**isolation.worker_path_env(), **env_updates}  # with the GPU Ray pinned (CUDA_VISIBLE_DEVICES)
            cuda_home = toolkit.find_cuda_home()
            if cuda_home is not None:
                env["CUDA_HOME"] = str(cuda_home)
            self.jobs += 1
            return self.launch(job, timeout_s, env)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def describe(self) -> SlotInfo:
        """What the slot is: its process, its GPU, the jobs it ran and the zygotes its warm starts started."""
        return {"pid": os.getpid(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "jobs": self.jobs,
                "zygotes": self.launch.zygotes_started}

    def close(self) -> None:
        self.launch.close()
        self._threads.shutdown(wait=False, cancel_futures=True)


class RayLauncher:
    """The run's launcher on Ray: a job goes to the slot actor its slot names (SLOT_ENV)."""

    def __init__(self, device: str, address: str | None) -> None:
        import ray  # optional (the ray extra) and heavy: only --executor ray imports it

        self._ray = ray
        try:
            ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - Ray's own start: a binary it cannot run, a head it cannot reach
            where = f"the Ray cluster at {address} could not be reached" if address else \
                "a local Ray cluster did not start"
            raise ClusterError(f"--executor ray: {where} ({_first_line(exc)})") from None
        # a job's start, the running one's finish and describe/close may be under way at once: a threaded actor
        remote: Any = ray.remote  # its typed overloads know no actor options (max_concurrency)
        one = remote(max_restarts=0, max_concurrency=4, **({"num_gpus": 1} if device == "cuda" else {"num_cpus": 1}))
        self._actor = one(SlotActor)
        self._device = device
        self.slots: list[Any] = []

    def width(self, parallel: int | None) -> int:
        """As many slots as the cluster has GPUs (CUDA) or `parallel` allows (CPU: default 1)."""
        if self._device != "cuda":
            return parallel or 1  # parallel CPU timings would disturb each other
        width = parallel or int(self._ray.cluster_resources().get("GPU", 0))
        if width < 1:
            raise UsageError("The Ray cluster has no GPUs; use --device cpu or add GPU nodes.")
        return width

    def start(self, width: int) -> None:
        self.slots = [self._actor.remote(self._device) for _ in range(width)]

    def __call__(self, job: Job, timeout_s: float, env: dict[str, str]) -> ChildOutcome:
        """Run `job` on its slot's actor; once it has timed, release this slot's turn (run_on_slots' `early`), so the
        slot's next job reaches the actor and prepares there while this one finishes."""
        actor = self.slots[int(env[SLOT_ENV].removeprefix("ray-"))]
        refs = {s: getattr(job, s) for s in SHIPPED if hasattr(job, s)}
        files = {s: (Path(ref.path).name, Path(ref.path).read_bytes()) for s, ref in refs.items()}
        updates = {k: env[k] for k in FORWARDED_ENV if k in env}
        key = secrets.token_hex(8)
        self._ray.get(actor.start.remote(key, job, timeout_s, updates, files))
        turn = current_turn()
        if turn is not None:
            turn.release()
        return self._ray.get(actor.finish.remote(key))

    def describe(self) -> list[SlotInfo]:
        return self._ray.get([actor.describe.remote() for actor in self.slots])

    def close(self) -> None:
        """End every slot's zygote and spares, then the actors."""
        try:
            self._ray.get([actor.close.remote() for actor in self.slots], timeout=60)
        except Exception:  # noqa: BLE001 - an actor already gone has nothing left to close
            pass
        for actor in self.slots:
            self._ray.kill(actor)
        self.slots = []


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def ray_executor(device: str, address: str | None, parallel: int | None) -> Executor:
    """A slot actor per GPU of the cluster (CUDA) or per `parallel` (CPU: default 1)."""
    try:
        import ray  # noqa: F401 - optional (the ray extra): is it installed?
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'kbench[ray]'") from None
    launcher = RayLauncher(device, address)
    width = launcher.width(parallel)
    launcher.start(width)
    return Executor("ray", tuple(f"ray-{i}" for i in range(width)), launcher, pins=False, close=launcher.close,
                    slot_env=SLOT_ENV)
