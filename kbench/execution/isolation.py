"""Run one job in a fresh child process with a timeout; every way it can end becomes an outcome."""

from __future__ import annotations

import os
from pathlib import Path

from kbench.execution.child import ChildOutcome, JobChild, job_env
from kbench.execution.zygote import Zygote, ZygoteError
from kbench.wire.jobs import Job


def run_child(job: Job, timeout_s: float, env: dict[str, str] | None = None) -> ChildOutcome:
    """Run `python -m kbench.execution.worker` on `job` in a fresh child process, killed after timeout_s."""
    return JobChild(env).run(job, timeout_s)


def run_forked(zygote: Zygote | None, job: Job, timeout_s: float, env: dict[str, str]) -> ChildOutcome:
    """`run_child`, with the worker forked by `zygote` (started with `env`) while it is up; else started the slow
    way. The job's own variables (JOB_ENV) come with the job."""
    if zygote is not None and zygote.alive():
        try:
            child = JobChild(env, zygote=zygote)
        except ZygoteError:
            pass
        else:
            return child.run(job, timeout_s, env=job_env(env))
    return run_child(job, timeout_s, env)


def worker_path_env() -> dict[str, str]:
    """Make sure the child can import kbench even when the parent runs from a source checkout."""
    env = dict(os.environ)
    # Spinning OpenMP threads of the judge would steal cores from the candidate's timed calls (and the reverse):
    # idle threads sleep instead, in every child alike, unless the user chose otherwise.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Inductor compiles in the process that calls torch.compile. Its default, a pool of one worker per core of the
    # machine, is decided when its config is first imported (before a child is pinned to its one timing core) and
    # would start every worker on that core while calls are timed: on the H100 the reference's host clock then saw
    # twice the event time on one of its two models.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the kbench package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
