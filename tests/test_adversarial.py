"""Adversarial and broken solutions, each with its exact verdict and flags (the CPU-runnable cases)."""

import json
import os
from pathlib import Path

import pytest

from kbench.discovery import select
from kbench.records import EAGER, RunConfig, Status, TimingPolicy
from kbench.runner import execute
from kbench.static_checks import analyze
from tests.conftest import FIXTURES

ADVERSARIAL = FIXTURES / "adversarial"
CPU_CASES = {
    # solution: (verdict, flags that must be raised)
    "empty_output": (Status.INCORRECT, set()),
    "caches_output": (Status.INCORRECT, {"caching"}),
    "modifies_input": (Status.CORRECT, {"modifies_inputs"}),
    "constant": (Status.INCORRECT, {"no_custom_kernel"}),
    "pytorch_only": (Status.CORRECT, {"no_custom_kernel"}),
    "patches_timers": (Status.CORRECT, {"monkey_patch"}),
    "bf16_inside": (Status.CORRECT, {"low_accuracy", "precision_downcast"}),
    "racy": (Status.CORRECT, {"non_deterministic"}),
    "forges_files": (Status.INCORRECT, {"harness_access"}),
}
LOOSE = 2e-2  # loose enough for bf16_inside to pass, so that only its accuracy flag catches it


@pytest.fixture(scope="module")
def adversarial_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adv")
    config = RunConfig(device="cpu", trials=3, atol=LOOSE, rtol=LOOSE, two_sizes=True, compile_baseline=False,
                       timeout_s=60, timing=TimingPolicy(max_time_s=0.2), results_dir=tmp / "results",
                       cache_dir=tmp / "cache")
    problems, solutions = select(["tiny"], None, FIXTURES / "problems", ADVERSARIAL)
    solutions = {"tiny": [s for s in solutions["tiny"] if s.name in CPU_CASES]}
    cwd = os.getcwd()
    os.chdir(tmp)  # forges_files rewrites every run.json below the working directory
    try:
        store = execute(config, problems, solutions, Path(cwd))
    finally:
        os.chdir(cwd)
    return store


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_verdict_and_flags(adversarial_run, name):
    row = next(e for e in adversarial_run.evaluations if e.solution == name)
    status, flags = CPU_CASES[name]
    assert row.status == status, (row.status, row.message, row.warnings)
    assert flags <= set(row.flags), row.warnings


def test_honest_rows_raise_no_runtime_flags(adversarial_run):
    eager = next(e for e in adversarial_run.evaluations if e.solution == EAGER)
    assert eager.status == Status.CORRECT and eager.flags == ()
    pytorch_only = next(e for e in adversarial_run.evaluations if e.solution == "pytorch_only")
    assert set(pytorch_only.flags) == {"no_custom_kernel"}
    assert pytorch_only.extra["accuracy"]["solution"] < 1e-5


def test_patched_timers_do_not_change_the_timing(adversarial_run):
    rows = {e.solution: e for e in adversarial_run.evaluations}
    patched, honest = rows["patches_timers"], rows["pytorch_only"]
    assert min(patched.timing.samples) > 0 and min(patched.timing.host_samples) > 0
    # Same computation: the medians agree to within a factor of 3 on a noisy shared CPU, far from the 0 the patch fakes.
    assert honest.timing.median / 3 < patched.timing.median < honest.timing.median * 3
    assert any("time.perf_counter" in w and "torch.cuda.Event" in w for w in patched.warnings)


def test_bf16_is_reported_against_float64(adversarial_run):
    row = next(e for e in adversarial_run.evaluations if e.solution == "bf16_inside")
    accuracy = row.extra["accuracy"]
    assert accuracy["solution"] > 100 * accuracy["reference"]


def test_forged_files_and_descriptors_change_nothing(adversarial_run):
    doc = json.loads((adversarial_run.directory / "run.json").read_text())
    assert doc["format"] == "kbench-run" and doc["state"] == "complete"
    forged = next(e for e in doc["evaluations"] if e["solution"] == "forges_files")
    assert forged["status"] == "incorrect"


def test_fallback_inside_try_except_is_flagged_statically():
    codes = {f.code for f in analyze((ADVERSARIAL / "tiny" / "kernel_fallback.py").read_text())}
    assert "try_except_fallback" in codes


def test_side_stream_is_flagged_statically():
    codes = {f.code for f in analyze((ADVERSARIAL / "tiny" / "side_stream.py").read_text())}
    assert "new_stream" in codes
