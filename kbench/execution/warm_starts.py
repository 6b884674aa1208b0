"""Warm starts: a run's launcher that forks each job's fresh worker from a zygote, one started ahead on CUDA."""

from __future__ import annotations

import os
import sys
import threading

from kbench.execution.child import ChildOutcome, JobChild, job_env, shared_env, zygote_env_of
from kbench.execution.pool import current_turn
from kbench.execution.timeline import Timeline
from kbench.execution.zygote import Zygote, ZygoteError
from kbench.wire.jobs import BuildJob, CheckJob, EvaluateJob, Job, ReferenceJob


class WarmStarts:
    """A launcher like `run_child` for a run's evaluations: each job gets a fresh worker, forked by a zygote that
    imported torch and kbench once for every worker of the run (kbench.execution.zygote; one zygote serves every GPU:
    each worker is placed on its slot's GPU when it is forked).

    With `ahead` (CUDA runs) one worker per slot is forked ahead for the slot's next job as soon as the running job
    reports that its timing is over, and another when it ends, for the job after next, so that each (and, when its job
    is likely a solution's, its candidate) has its CUDA contexts made before its job comes. The next job is taken to be
    of the running one's kind: a run evaluates its references first, then its solutions. On the CPU a worker is forked
    when its job comes (a spare's start-up would share the timed cores). If a zygote cannot start, workers start the
    slow way (`python -m kbench.execution.worker`).

    When the jobs come through run_on_slots with `early`, a job's "timed" (or its end) also releases its turn
    (kbench.execution.pool.Turn): the slot's next job goes to its worker (the spare, on CUDA) at once and prepares
    what times nothing (the judge's reference built and called, the candidate's) while this one finishes its checks;
    it times nothing until this one has ended.
    """

    def __init__(self, ahead: bool = True) -> None:
        self.ahead = ahead
        # The child after next, started when the running job ends (`__call__`); AFTER_NEXT_ENV="0": only at the next
        # job's "timed" (a measurement of what its CUDA contexts, made while the next job times, cost that job)
        self.after_next = os.environ.get(AFTER_NEXT_ENV, "1") != "0"
        self._spares: dict[Key, JobChild] = {}  # a slot's next worker (of the kind `JobChild.candidate` says)
        self._zygotes: dict[Key, Zygote | None] = {}
        # Slots whose running job ended while the spare for the next job still waited (that job not yet come for it,
        # e.g. its thread not yet scheduled): the child after next is then started when the next job takes the spare.
        self._owed: set[Key] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.zygotes_started = 0  # by this launcher (an adopted one not counted)
        self.timeline = Timeline()  # each job's times on its slot, when the run is asked for them

    def adopt(self, zygote: Zygote, env: dict[str, str]) -> None:
        """Use an already started zygote (the run's probe's) for the jobs whose environment is `env` on any GPU; the
        launcher closes it with the others."""
        with self._lock:
            self._zygotes.setdefault(_key(zygote_env_of(env)), zygote)

    def _zygote(self, env: dict[str, str]) -> Zygote | None:
        key = _key(zygote_env_of(env))
        with self._lock:
            if key not in self._zygotes and not self._closed:
                self._zygotes[key] = Zygote(zygote_env_of(env))
                self.zygotes_started += 1
            zygote = self._zygotes.get(key)
        return zygote if zygote is not None and zygote.alive() else None

    def _child(self, env: dict[str, str], candidate: bool) -> JobChild:
        zygote = self._zygote(env)
        if zygote is not None:
            try:
                return JobChild(env, warm=self.ahead, zygote=zygote, candidate=candidate)
            except ZygoteError as exc:
                print(f"[warning] kbench's zygote failed ({exc}); workers start without it", file=sys.stderr)
                with self._lock:
                    self._zygotes[_key(zygote_env_of(env))] = None
                zygote.close()
        return JobChild(env, warm=self.ahead, candidate=candidate)

    def _start_spare(self, key: Key, env: dict[str, str], candidate: bool, after_next: bool = False) -> None:
        if not self.ahead:
            return
        with self._lock:
            if self._closed:
                return
            if key in self._spares:  # the next job's, not yet taken: the job after next's starts when it is
                if after_next:
                    self._owed.add(key)
                return
        child = self._child(env, candidate)
        with self._lock:
            if self._closed or key in self._spares:
                child.discard()
                return
            self._spares[key] = child

    def __call__(self, job: Job, timeout_s: float, env: dict[str, str]) -> ChildOutcome:
        shared = shared_env(env)
        key, solution = _key(shared), job.mode == "evaluate"
        with self._lock:
            child = self._spares.pop(key, None)
            owed = key in self._owed
            self._owed.discard(key)
        if owed:  # the previous job has ended: the child after next starts now, as it would have at that end
            self._start_spare(key, shared, solution)
        # none yet, one that died waiting, or one started for the other kind of job
        if child is None or child.proc.poll() is not None or child.candidate != solution:
            if child is not None:
                child.discard()
            child = self._child(shared, solution)

        turn = current_turn()
        timed = threading.Event()
        mark = child.mark = self.timeline.marker(env.get("CUDA_VISIBLE_DEVICES"), job_name(job), job.mode)
        mark("started", child.started_at)
        mark("handed")

        def on_event(name: str) -> None:  # the job's timing is over: the slot's next job may start now
            if name == "timed":
                mark("timed")
                timed.set()
                self._start_spare(key, shared, solution)
                if turn is not None:
                    turn.release()  # the next job takes the spare and prepares while this one finishes

        gone = threading.Event()
        end = turn.end_later() if turn is not None else None

        def exited() -> None:
            gone.set()
            if end is not None:
                end()

        outcome = child.run(job, timeout_s, env=job_env(env), on_event=on_event,
                            turn=turn.previous if turn is not None else None, on_exit=exited)
        if turn is not None and child.ended_before_turn and short_of_memory(outcome):
            # It ran out of memory while the slot's previous job still held the GPU: once that one and this first
            # try have ended, again (the first try's exit ends nothing now: Turn.end_again).
            gone.wait(CLOSE_WAIT_S)
            turn.previous.wait()
            child = self._child(shared, solution)
            child.mark = mark
            outcome = child.run(job, timeout_s, env=job_env(env), on_event=on_event, on_exit=turn.end_again())
        # The slot's child after next starts now (the next job took the spare started at this one's "timed", or
        # none if this one never timed): it makes its CUDA contexts while the next job times, which an honest copy
        # does not feel (all 100 level-2 copies 0.996-1.008x on four H100s with 349 of 400 rows timed so), while a
        # child started only at the next job's "timed" makes the job after it wait for its contexts: 0.6-1.8 s a row
        # on the H100 machine (2026-11-27, docs/benchmarks.md). The judge does not count it as another program on
        # its GPU (kbench.system.machine.kbench_elsewhere). If the next job has not yet taken its spare, this one
        # starts when it does.
        if self.after_next:
            self._start_spare(key, shared, solution, after_next=True)
        return outcome

    def waiting(self) -> int:
        """How many started children wait for a job."""
        with self._lock:
            return sum(child.proc.poll() is None for child in self._spares.values())

    def close(self) -> None:
        """Kill the children still waiting for a job, and the zygotes."""
        with self._lock:
            self._closed = True
            spares, self._spares = list(self._spares.values()), {}
            zygotes, self._zygotes = [z for z in self._zygotes.values() if z is not None], {}
        for child in spares:
            child.discard()
        for zygote in zygotes:
            zygote.close()


Key = tuple[tuple[str, str], ...]
AFTER_NEXT_ENV = "KBENCH_AFTER_NEXT"
CLOSE_WAIT_S = 30.0  # how long a job run again waits for its first try's worker to be gone


def short_of_memory(outcome: ChildOutcome) -> bool:
    """Whether the job failed for want of memory (the judge's `[check_skipped]` or a process's failure that says so)."""
    result = outcome.result
    message = str(getattr(result, "message", ""))
    return result is not None and result.status in ("not_run", "runtime_error") and "out of memory" in message


def job_name(job: Job) -> str:
    """What the timeline names a job by: problem/solution for a solution's, problem/mode for a reference's or a
    problem's check, the solution for a build, the mode for a probe."""
    if isinstance(job, EvaluateJob):
        return f"{job.problem.name}/{job.solution.name}"
    if isinstance(job, (ReferenceJob, CheckJob)):
        return f"{job.problem.name}/{job.mode}"
    if isinstance(job, BuildJob):
        return job.solution.name
    return job.mode


def _key(env: dict[str, str]) -> Key:
    return tuple(sorted(env.items()))
