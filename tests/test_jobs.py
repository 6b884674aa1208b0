"""The parent <-> child protocol: typed jobs and results, checked field by field where they are read."""

import json
import math
import os
import subprocess
import sys

import pytest

from kbench.execution import child, isolation
from kbench.results.codec import ProtocolError, decode, encode
from kbench.wire.jobs import (
    BuildJob, CheckJob, EvaluateJob, Envelope, OtherSize, ProbeJob, ProblemRef, ReferenceJob,
    ReferenceResult, SolutionRef,
)
from kbench.config.run_config import MathFlags, TimingPolicy
from kbench.results.records import Evaluation, Measurement, Status, TrialResult

COMMON = {"problem": ProblemRef("p", "/problems/p/model.py", {"N": 64}), "device": "cuda", "precision": "bf16",
          "seed": 7, "trials": 3, "atol": 1e-2, "rtol": 1e-2, "math": MathFlags.from_tf32(False),
          "timing": TimingPolicy(min_samples=20), "kernel_profile": False}
JOBS = [ReferenceJob(**COMMON, compile_baseline=False, ceilings_dir="/cache/ceilings"),
        EvaluateJob(**COMMON, solution=SolutionRef("fast", "/s/fast.py"), other_sizes=(OtherSize("small", {"N": 4}),)),
        CheckJob(**COMMON), BuildJob(SolutionRef("fast", "/s/fast.py")), ProbeJob()]


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.mode)
def test_every_job_crosses_the_pipe_as_the_same_record(job):
    envelope = Envelope(job, "token", {"TORCH_EXTENSIONS_DIR": "/x"})
    assert decode(Envelope, json.loads(encode(envelope))) == envelope


def test_a_job_missing_a_field_or_with_a_wrong_type_is_refused():
    wire = json.loads(encode(Envelope(JOBS[1], "t")))
    del wire["job"]["solution"]
    with pytest.raises(ProtocolError, match="not a valid Envelope"):
        decode(Envelope, wire)
    wire = json.loads(encode(Envelope(JOBS[0], "t")))
    wire["job"]["seed"] = "seven"
    with pytest.raises(ProtocolError):
        decode(Envelope, wire)


def test_a_failed_trials_nan_error_survives_the_wire():
    result = Evaluation(status=Status.INCORRECT, trials=(TrialResult(1, False, max_abs_err=float("nan"), max_rel_err=math.inf),))
    back = decode(Evaluation, json.loads(encode(result)))
    assert math.isnan(back.trials[0].max_abs_err) and back.trials[0].max_rel_err == math.inf


def test_the_parent_refuses_a_result_that_is_not_the_record_its_job_is_answered_with():
    job = JOBS[1]
    good, why = child._checked(job, {"status": "correct", "timing": {"samples": [1e-3, 2e-3]}})
    assert why == "" and isinstance(good, Evaluation) and good.timing == Measurement((1e-3, 2e-3))
    bad, why = child._checked(job, {"status": "correct", "timing": {"samples": "fast"}})
    assert bad is None and why.startswith("not a valid Evaluation: timing")
    outcome = child.ChildOutcome(bad, 0, False, 1.0, "", why)
    status, message = outcome.failure
    assert status == "crashed" and "the child's result was refused: not a valid Evaluation" in message
    failed, _ = child._checked(JOBS[0], {"status": "timeout", "message": "slow"})  # a failure: status and message only
    assert isinstance(failed, ReferenceResult) and (failed.status, failed.message) == ("timeout", "slow")


def test_a_worker_given_a_job_that_is_not_one_answers_with_a_harness_error_under_its_token():
    read, write = os.pipe()
    text = json.dumps({"token": "tok", "job": {"mode": "evaluate", "device": "cpu"}})
    proc = subprocess.run([sys.executable, "-m", "kbench.execution.worker", "--result-fd", str(write)], input=text.encode(),
                          pass_fds=(write,), env=isolation.worker_path_env(), capture_output=True, timeout=120)
    os.close(write)
    with os.fdopen(read) as pipe:
        lines = [json.loads(line) for line in pipe.read().splitlines()]
    assert proc.returncode == 0 and [m["token"] for m in lines] == ["tok"]
    result = lines[0]["result"]
    assert result["status"] == "runtime_error" and result["message"].startswith("harness error: the job is not valid")


def test_a_probe_job_runs_end_to_end_as_typed_records():
    outcome = isolation.run_child(ProbeJob(), 120, isolation.worker_path_env())
    assert outcome.failure is None and outcome.result.status == "ok", outcome.log
    assert "torch" in outcome.result.environment


def test_every_outcome_becomes_a_result_of_its_jobs_kind():
    """child.answer: the one place an outcome becomes a status (a timeout, a death, a refused or foreign result)."""
    ok = Evaluation(status=Status.CORRECT, timing=Measurement((1e-3,)))
    assert child.answer(child.ChildOutcome(ok, 0, False, 1.0, ""), Evaluation) is ok
    timed_out = child.answer(child.ChildOutcome(None, None, True, 900.0, ""), Evaluation)
    assert (timed_out.status, timed_out.timing) == ("timeout", None) and "900 s" in timed_out.message
    killed = child.answer(child.ChildOutcome(None, -9, False, 2.0, "boom\n"), ReferenceResult)
    assert isinstance(killed, ReferenceResult) and killed.status == "crashed" and "SIGKILL" in killed.message
    foreign = child.answer(child.ChildOutcome(ReferenceResult("correct"), 0, False, 1.0, ""), Evaluation)
    assert isinstance(foreign, Evaluation) and foreign.status == "crashed"


def test_a_judge_that_runs_out_of_memory_outside_a_guarded_step_is_not_run_not_the_solutions_failure(monkeypatch):
    """On the H100 a judge holding a multi-GB problem's forward and backward ran out of memory outside the steps that
    say so themselves: the row is not_run with [check_skipped], never a runtime_error of the solution's."""
    import torch

    from kbench.execution import worker
    from kbench.wire.jobs import Envelope, ProbeJob

    def exhausted(job, held):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

    monkeypatch.setitem(worker.MODES, "probe", exhausted)
    result = worker._run(Envelope(ProbeJob()))
    assert result["status"] == "not_run" and result["message"].startswith("[check_skipped] the judge ran out of memory")

    def broken(job, held):
        raise RuntimeError("something else")

    monkeypatch.setitem(worker.MODES, "probe", broken)
    assert worker._run(Envelope(ProbeJob()))["status"] == "runtime_error"
