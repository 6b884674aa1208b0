"""Adversarial and broken solutions, each with its exact verdict and flags (the CPU-runnable cases)."""

import json
import os
from pathlib import Path

import pytest

from kbench.results.findings import MACHINE as MACHINE_CODES
from kbench.commands.execute import execute
from kbench.judge.checks.static_checks import analyze
from kbench.problems.discovery import select
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.results.records import EAGER, Status
from tests.conftest import FIXTURES

ADVERSARIAL = FIXTURES / "adversarial"
CPU_CASES = {
    # solution: (verdict, flags that must be raised)
    "empty_output": (Status.INCORRECT, set()),
    "caches_output": (Status.INCORRECT, {"caching"}),
    "modifies_input": (Status.CORRECT, {"modifies_inputs"}),
    "constant": (Status.INCORRECT, {"no_custom_kernel"}),
    "pytorch_only": (Status.CORRECT, {"no_custom_kernel"}),
    "patches_timers": (Status.SUSPECT, {"monkey_patch", "clock_patched"}),
    "bf16_inside": (Status.CORRECT, {"low_accuracy", "precision_downcast"}),
    "racy": (Status.CORRECT, {"non_deterministic"}),
    # Its writes to every descriptor reach the judge's pipe to the candidate: the protocol breaks, nothing is forged.
    "forges_files": (Status.RUNTIME_ERROR, {"harness_access"}),
}
# One or more fixtures per attack class, on a problem whose calls take milliseconds (see docs/checks.md's table).
TIMED_CASES = {
    "honest_copy": (Status.CORRECT, set()),
    "patches_reference_modules": (Status.INCORRECT, set()),
    "patches_torch_functions": (Status.INCORRECT, {"monkey_patch"}),
    "replays_after_warmup": (Status.INCORRECT, set()),
    "replays_after_a_moment": (Status.INCORRECT, set()),
    "replays_same_buffer": (Status.INCORRECT, set()),
    "replays_by_pointer": (Status.INCORRECT, set()),
    "float64_at_import": (Status.SUSPECT, {"state_changed"}),
    "float64_left_by_a_call": (Status.SUSPECT, {"state_changed"}),
    "cuts_threads": (Status.SUSPECT, {"state_changed"}),
    "cuts_interop_threads": (Status.SUSPECT, {"state_changed"}),
    "flushes_denormals": (Status.SUSPECT, {"state_changed"}),
    "subclass_output": (Status.INCORRECT, set()),
    "lazy_output": (Status.INCORRECT, set()),
    "busy_thread": (Status.CORRECT, {"threads"}),
    # A thread spinning in Python holds the interpreter lock: the harness in that process answers late, and the
    # judge's bound on the reported time usually fails (suspect); either way no speedup shows.
    "busy_python_thread": (Status.SUSPECT, {"threads"}),
    "reads_gc_tensors": (Status.INCORRECT, set()),
    "reads_gc_models": (Status.INCORRECT, set()),
    "dies_mid_call": (Status.CRASHED, set()),
    # Processes outside the frozen process group: one in a session of its own, one orphaned (re-parented to the
    # judge, a child subreaper); their CPU time during timing makes the row suspect, and they are killed.
    "escapes_by_session": (Status.SUSPECT, {"escaped_process"}),
    "escapes_as_orphan": (Status.SUSPECT, {"escaped_process"}),
    # A helper in a process group of its own: stopped at every freeze with the candidate's tree, it spins only while
    # the candidate is timed, and its CPU time makes the row suspect.
    "helper_in_group": (Status.SUSPECT, {"escaped_process"}),
    # One that spins only while the candidate is stopped (while the reference is timed): stopped with it, it never
    # spins, and the row is an honest copy's (without the freezer it slowed the reference and was `suspect`).
    "spins_while_frozen": (Status.CORRECT, set()),
}
HONEST_SPEEDUP = 1.15  # no plain-PyTorch copy of the reference may be reported faster than this
# Except a copy that spins a thread of its own: on the 2-vCPU CI machine (a VM) a process whose other thread keeps a
# vCPU busy runs its own calls faster (busy_thread measured 1.00-1.27x eager over nine runs, honest_copy 0.77-1.05x;
# flushing the CPU caches before each call changed nothing, so it is the VM's idle vCPUs waking, not the caches).
# The row carries [threads]; docs/checks.md, "What kbench does not defend", says so.
SPINNING_SPEEDUP = {"busy_thread": 1.35}
# Correct or suspect, as long as no speedup shows: a thread left spinning delays the candidate's answers on a small
# machine, which the judge's clock sees as time the reported one leaves out.
EITHER = {"busy_python_thread", "busy_thread"}
LOOSE = 2e-2  # loose enough for bf16_inside to pass, so that only its accuracy flag catches it


@pytest.fixture(scope="module")
def adversarial_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adv")
    config = RunConfig(device="cpu", trials=3, atol=LOOSE, rtol=LOOSE, two_sizes=True, compile_baseline=False,
                       timeout_s=60, timing=TimingPolicy(max_time_s=0.2), results_dir=tmp / "results",
                       cache_dir=tmp / "cache")
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", ADVERSARIAL)
    solutions = {"tiny": [s for s in solutions["tiny"] if s.name in CPU_CASES]}
    cwd = os.getcwd()
    os.chdir(tmp)  # forges_files rewrites every run.json below the working directory
    try:
        store = execute(config, problems, solutions, Path(cwd))
    finally:
        os.chdir(cwd)
    return store


@pytest.fixture(scope="module")
def timed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timed")
    config = RunConfig(device="cpu", trials=3, compile_baseline=False, timeout_s=60,
                       timing=TimingPolicy(max_time_s=1.0), results_dir=tmp / "results", cache_dir=tmp / "cache")
    problems, solutions = select(["timed"], [], FIXTURES / "problems", ADVERSARIAL)
    # One intra-op thread in every child: on a 2-core machine the wake-ups of two processes' thread pools moved an
    # honest copy's ratio between 0.67x and 1.17x from run to run; with one thread it stayed within 0.89-0.95x.
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        return execute(config, problems, solutions, Path.cwd())
    finally:
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous


def test_processes_a_solution_started_outside_its_group_are_gone_after_the_run(timed_run):
    marked = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if b"kbench-escape-marker" in f.read():
                        marked.append(int(name))
            except OSError:
                pass
    assert marked == []


@pytest.mark.parametrize("name", sorted(TIMED_CASES))
def test_each_attack_class_gets_its_verdict(timed_run, name):
    row = next(e for e in timed_run.evaluations if e.solution == name)
    status, flags = TIMED_CASES[name]
    allowed = {status, Status.CORRECT} if name in EITHER else {status}
    assert row.status in allowed, (row.status, row.message, row.warnings)
    assert flags <= set(row.flags), row.warnings
    # Whatever the verdict, no plain-PyTorch copy of the reference is reported faster than noise allows.
    bound = SPINNING_SPEEDUP.get(name, HONEST_SPEEDUP)
    assert row.speedup_vs_eager is None or row.speedup_vs_eager <= bound, (row.speedup_vs_eager, row.warnings)


def test_a_replayed_output_is_caught_in_a_timed_call_with_its_index(timed_run):
    row = next(e for e in timed_run.evaluations if e.solution == "replays_after_warmup")
    assert row.message.startswith("timed call "), row.message
    assert all(t.passed for t in row.trials)  # honest through the correctness trials: only the rechecks catch it


def test_suspect_rows_keep_their_samples_but_show_no_speedup(timed_run):
    rows = [e for e in timed_run.evaluations if e.status == Status.SUSPECT]
    assert rows
    for row in rows:
        assert row.timing is not None and len(row.timing.samples) >= 1
        assert row.speedup_vs_eager is None and row.speedup_vs_compile is None
        assert row.message.startswith("outputs pass, timing not trusted: [")


def test_outputs_that_are_not_plain_tensors_say_what_was_returned(timed_run):
    rows = {e.solution: e for e in timed_run.evaluations}
    assert "not a plain torch.Tensor" in rows["subclass_output"].message
    assert "Lazy" in rows["lazy_output"].message


def test_the_judge_measures_what_the_protocol_costs(timed_run):
    row = next(e for e in timed_run.evaluations if e.solution == "honest_copy")
    protocol = row.diagnostics.protocol
    assert protocol.rounds == len(row.timing.samples) == len(row.timing.judge_samples)
    from kbench.judge.timing.rounds import RECHECK_FLOOR

    # Every call is spot-checked inside the judge's window; full rechecks follow a budget (kbench.judge.timing.rounds).
    assert RECHECK_FLOOR * protocol.rounds <= protocol.rechecked <= protocol.rounds
    assert protocol.regime == row.timing.regime == "host" and 0 < protocol.calibration_p50_s
    assert all(j >= t for j, t in zip(row.timing.judge_samples, row.timing.samples))  # the window holds the call


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_verdict_and_flags(adversarial_run, name):
    row = next(e for e in adversarial_run.evaluations if e.solution == name)
    status, flags = CPU_CASES[name]
    assert row.status == status, (row.status, row.message, row.warnings)
    assert flags <= set(row.flags), row.warnings


def test_honest_rows_raise_no_runtime_flags(adversarial_run):
    eager = next(e for e in adversarial_run.evaluations if e.solution == EAGER)
    assert eager.status == Status.CORRECT and set(eager.flags) - MACHINE_CODES == set()
    pytorch_only = next(e for e in adversarial_run.evaluations if e.solution == "pytorch_only")
    assert set(pytorch_only.flags) - MACHINE_CODES == {"no_custom_kernel"}
    assert pytorch_only.accuracy.solution < 1e-5


def test_patched_timers_do_not_change_the_timing(adversarial_run):
    rows = {e.solution: e for e in adversarial_run.evaluations}
    patched, honest = rows["patches_timers"], rows["pytorch_only"]
    assert min(patched.timing.samples) > 0 and min(patched.timing.host_samples) > 0
    # Same computation: the medians agree to within a factor of 3 on a noisy shared CPU, far from the 0 the patch fakes.
    assert honest.timing.median / 3 < patched.timing.median < honest.timing.median * 3
    assert any("time.perf_counter" in w.message and "torch.cuda.Event" in w.message for w in patched.warnings)


def test_bf16_is_reported_against_float64(adversarial_run):
    row = next(e for e in adversarial_run.evaluations if e.solution == "bf16_inside")
    accuracy = row.accuracy
    assert accuracy.solution > 100 * accuracy.reference


def test_forged_files_and_descriptors_change_nothing(adversarial_run):
    doc = json.loads((adversarial_run.directory / "run.json").read_text())
    assert doc["format"] == "kbench-run" and doc["state"] == "complete"
    forged = next(e for e in doc["evaluations"] if e["solution"] == "forges_files")
    assert forged["status"] == "runtime_error" and "broke the protocol" in forged["message"]


def test_fallback_inside_try_except_is_flagged_statically():
    codes = {f.code for f in analyze((ADVERSARIAL / "tiny" / "kernel_fallback.py").read_text())}
    assert "try_except_fallback" in codes


def test_side_stream_is_flagged_statically():
    codes = {f.code for f in analyze((ADVERSARIAL / "tiny" / "side_stream.py").read_text())}
    assert "new_stream" in codes
