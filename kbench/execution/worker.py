"""The child process of one job: a solution's judge, the reference's timing, a problem check, a build or a probe.

Run as `python -m kbench.execution.worker --result-fd N` with the job as JSON on stdin. The result goes to
the inherited pipe N, never to stdout, so nothing a solution prints can pass for a result. In the
`evaluate` mode this process is the judge (kbench.judge.judge) and never imports the solution; only the
`build` mode imports one, to compile its extensions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kbench.judge import judge
from kbench.judge.candidate.candidate import warm_cuda
from kbench.judge.candidate.loading import load_solution
from kbench.judge.candidate.session import Reserve
from kbench.judge.harness import out_of_memory
from kbench.judge.judge import CandidateProcess
from kbench.judge.reference import check_problem, time_reference
from kbench.judge.verdict import Verdict, short
from kbench.results import codec
from kbench.results.codec import ProtocolError, decode, to_wire
from kbench.results.records import Evaluation
from kbench.system import cores, machine
from kbench.system.environment import describe_torch
from kbench.system.lifetime import remove_temp_dir
from kbench.system.toolkit import BUILT_MARKER
from kbench.wire.jobs import (
    OK,
    WIRE_TYPES,
    BuildJob,
    BuildJobResult,
    Envelope,
    EvaluateJob,
    ProbeJob,
    ProbeResult,
    ReferenceJob,
)


def _silent(event: str, **fields: Any) -> None:
    return None


@dataclass
class Held:
    """What this worker holds for its one job, handed to the job's mode (`MODES`)."""

    announce: Callable[..., None] = _silent  # a progress event for the parent, on the result pipe (serve)
    spare: CandidateProcess | None = None  # a candidate process started while this worker waited for its job
    reserve: CandidateProcess | None = None  # a second one forked beside it: the judge's witness or fresh candidate
    env: dict[str, str] = field(default_factory=dict)  # the job's own environment variables (child.JOB_ENV)

    def start_candidates(self, init_cuda: bool, forked: bool) -> None:
        """The judge's candidate process, and when forked its reserve beside it (a fork costs milliseconds, a spawn
        seconds of CPU: a spawned worker's judge spawns one only when it needs it)."""
        self.spare = CandidateProcess(init_cuda=init_cuda, fork=forked)
        self.reserve = CandidateProcess(fork=True) if forked else None

    def drop_candidates(self) -> None:
        """Kill the candidate processes started for a solution's job that did not come."""
        for each in (self.spare, self.reserve):
            if each is not None:
                each.kill()
        self.spare = self.reserve = None


def wait_turn() -> None:
    """Return once this job may time on its GPU: the parent ends the job's stdin when the slot's previous job has
    ended (kbench.execution.pool.Turn), at once when there is none. The job itself is the first line."""
    sys.stdin.read()


def judge_solution(job: EvaluateJob, held: Held) -> Evaluation:
    """A solution's evaluation: this process becomes its judge (kbench.judge.judge); the solution runs in its child."""
    return judge.judge_solution(job, held.env, held.announce, held.spare, wait_turn, Reserve(held.reserve))


def reference(job: ReferenceJob, held: Held) -> Any:
    return time_reference(job, held.announce, wait_turn)


def build(job: BuildJob, held: Held) -> BuildJobResult:
    """Import the solution once so its extensions compile into the cache; run nothing."""
    _, info = load_solution(job.solution.path)
    Path(os.environ["TORCH_EXTENSIONS_DIR"], BUILT_MARKER).touch()
    return BuildJobResult(OK, seconds=info.seconds)


def probe(job: ProbeJob, held: Held) -> ProbeResult:
    return ProbeResult(OK, environment=describe_torch())


def warm_flop_counter() -> None:
    """The first FLOP count in a process costs seconds (imports, the counter's set-up): pay it before the job."""
    from kbench.measure import roofline  # heavy: the FLOP counter's imports are what this pays for, once

    roofline.problem_work(torch.nn.Linear(2, 2), [torch.zeros(1, 2)], device="meta")


MODES: dict[str, Callable[[Any, Held], Any]] = {"evaluate": judge_solution, "reference": reference, "build": build,
                                                "probe": probe, "check": lambda job, held: check_problem(job)}


def main() -> None:
    parser = argparse.ArgumentParser(description="kbench evaluation child (internal)")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--warm", action="store_true", help="started ahead of its job: make the CUDA contexts first")
    parser.add_argument("--no-candidate", action="store_true", help="start no candidate process ahead of the job")
    args = parser.parse_args()
    serve(args.result_fd, args.warm, candidate=not args.no_candidate)


def serve(result_fd: int, warm: bool, forked: bool = False, candidate: bool = True) -> None:
    """Take one job from stdin, write its result to result_fd, exit.

    With `candidate` (the job to come is likely a solution's), a worker forked by the zygote
    (kbench.execution.zygote) forks its candidate now, before it has a job or a CUDA context (the candidate inherits
    nothing of a job), and a worker started ahead of a CUDA job (`warm`) spawns it now. Either way with `warm` both
    make their CUDA contexts before the job arrives. A forked worker also forks a second candidate process then, the
    judge's reserve (kbench.judge.candidate.session.Reserve: a witness, or a fresh candidate), which makes its CUDA
    context only if it is used. Without `candidate` (a reference's job is likely), a forked worker that gets a
    solution's job after all forks both then, unless it made its CUDA context already."""
    cores.enter_untimed()  # off the run's timing cores until this job's turn pins it there (kbench.system.cores)
    held = Held()
    if (forked or warm) and candidate:
        held.start_candidates(init_cuda=warm, forked=forked)
    if warm:
        warm_cuda()
        machine.nvml()  # NVML's start (every GPU of the machine enumerated), read after each timing: paid ahead
    if warm and not forked:
        warm_flop_counter()  # a forked worker has it from the zygote
        codec.prepare(*WIRE_TYPES)
    ready = time.monotonic()  # what comes before a job is made: the run's timeline marks it (its "ready")
    envelope, token, problem = _read_envelope(sys.stdin.readline())
    solution = envelope is not None and envelope.job.mode == "evaluate"
    if held.spare is not None and not solution:
        held.drop_candidates()
    elif held.spare is None and solution and forked and not warm:
        held.start_candidates(init_cuda=False, forked=True)  # no CUDA context here yet: a fork is clean
    out = os.fdopen(result_fd, "w")

    def announce(event: str, **fields: Any) -> None:
        out.write(json.dumps({**fields, "token": token, "event": event}) + "\n")
        out.flush()

    held.announce = announce
    if envelope is not None:  # a job to run: the timeline's "ready" (an invalid one is answered at once)
        announce("ready", at=ready)
    result = {"status": "runtime_error", "message": f"harness error: {problem}"}
    if envelope is not None:
        held.env = envelope.env
        os.environ.update(envelope.env)  # what differs between jobs (kbench.execution.child.JOB_ENV)
        result = _run(envelope, held)
    sys.stdout.flush()
    sys.stderr.flush()
    out.write(json.dumps({"token": token, "result": result}) + "\n")
    out.flush()
    # Skip interpreter teardown: a solution's atexit hooks or threads must not hang or alter the exit.
    remove_temp_dir()  # which that teardown would have removed
    os._exit(0)


def _read_envelope(text: str) -> tuple[Envelope | None, str, str]:
    """(the envelope as sent, checked; its token; "") or (None, the token if one is legible, why it is not valid)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, "", f"the job is not JSON: {exc}"
    token = data["token"] if isinstance(data, dict) and isinstance(data.get("token"), str) else ""
    try:
        return decode(Envelope, data), token, ""
    except ProtocolError as exc:
        return None, token, f"the job is not valid: {exc}"


def _run(envelope: Envelope, held: Held | None = None) -> Any:
    """The job's result record as JSON values; a Verdict or any failure as a status and a message."""
    try:
        return to_wire(MODES[envelope.job.mode](envelope.job, held if held is not None else Held()))
    except Verdict as v:
        return {"status": v.status, "message": v.message}
    except BaseException as exc:  # noqa: BLE001 - any failure must still produce one result
        traceback.print_exc()
        if out_of_memory(exc):  # the judge's own process (the candidate's failures arrive as Verdicts)
            return {"status": "not_run", "message": f"[check_skipped] the judge ran out of memory ({short(exc)}); "
                    "the solution was not judged"}
        return {"status": "runtime_error", "message": f"harness error: {short(exc)}"}


if __name__ == "__main__":
    main()
