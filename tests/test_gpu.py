"""On a GPU: every shipped CUDA solution is correct and timed; a CUDA fault is contained."""

import os
import shutil
from pathlib import Path

import pytest

from kbench.results.findings import MACHINE as MACHINE_CODES
from kbench.results.findings import FindingCode
from kbench.results.findings import SUSPECT as SUSPECT_CODES
from kbench.commands.execute import execute
from kbench.problems.discovery import select
from kbench.judge.timing import placement
from kbench.judge.timing.checks import STOP_MAX_TIME
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.results.records import COMPILED, EAGER, Status
from tests.conftest import FIXTURES, ROOT
from tests.test_adversarial import HONEST_SPEEDUP, TIMED_CASES

pytestmark = pytest.mark.cuda

SHIPPED = ["conv3d_logsumexp", "conv3d_gelu", "convtranspose3d_layernorm", "convtranspose3d_softmax"]


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    """One build cache for every test here, so each shipped solution compiles once (KBENCH_TEST_CACHE: a cache kept
    between pytest runs, e.g. the one a `kbench run` just filled)."""
    return Path(os.environ["KBENCH_TEST_CACHE"]) if os.environ.get("KBENCH_TEST_CACHE") else tmp_path_factory.mktemp("cache")


def _config(tmp_path, cache=None, **kw):
    return RunConfig(device="cuda", trials=3, timing=TimingPolicy(max_time_s=1.0),
                     results_dir=tmp_path / "results", cache_dir=cache or tmp_path / "cache", **kw)


def test_shipped_cuda_solutions_are_correct_at_full_size(tmp_path, build_cache):
    problems, solutions = select(SHIPPED, [], ROOT / "problems", ROOT / "solutions")
    solutions = {p: [s for s in group if s.name in ("cuda_fused", "tf32_igemm", "triton_fused", "cpu_fused")]
                 for p, group in solutions.items()}  # the DSL examples have a test of their own
    store = execute(_config(tmp_path, build_cache, compile_baseline=False), problems, solutions, Path.cwd())
    rows = {(e.problem, e.solution): e for e in store.evaluations}
    for problem in SHIPPED:
        assert rows[(problem, EAGER)].status == Status.CORRECT
        for name in ("cuda_fused", "tf32_igemm", "triton_fused"):  # every problem has all three
            cuda = rows[(problem, name)]
            assert cuda.status == Status.CORRECT, f"{problem}/{name}: {cuda.message}"
            assert cuda.size == "full" and cuda.timing.median > 0 and cuda.speedup_vs_eager > 0
        assert rows[(problem, "cpu_fused")].status == Status.NOT_RUN


def test_fixture_verdicts_on_cuda_with_a_compile_baseline(tmp_path):
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", FIXTURES / "solutions")
    keep = {"good", "wrong_values", "exits", "raises_in_forward"}
    solutions = {"tiny": [s for s in solutions["tiny"] if s.name in keep]}
    store = execute(_config(tmp_path), problems, solutions, Path.cwd())
    verdicts = {e.solution: e.status for e in store.evaluations}
    assert verdicts == {
        EAGER: Status.CORRECT, COMPILED: Status.CORRECT, "good": Status.CORRECT,
        "wrong_values": Status.INCORRECT, "exits": Status.NOT_RUN, "raises_in_forward": Status.NOT_RUN,
    }


def test_an_illegal_address_fails_one_evaluation_not_the_run(tmp_path):
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", FIXTURES / "cuda_solutions")
    good = select(["tiny"], ["good"], FIXTURES / "problems", FIXTURES / "solutions")[1]["tiny"]
    store = execute(_config(tmp_path, compile_baseline=False), problems, {"tiny": solutions["tiny"] + good}, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    bad = rows["illegal_address"]
    assert bad.status == Status.RUNTIME_ERROR, (bad.status, bad.message)
    assert "illegal memory access" in bad.message
    assert rows["good"].status == Status.CORRECT  # the next evaluation has a healthy GPU


CUDA_CASES = {
    "empty_output": (Status.INCORRECT, set()),
    "caches_output": (Status.INCORRECT, set()),
    "pytorch_only": (Status.CORRECT, {"no_custom_kernel"}),
    "patches_timers": (Status.SUSPECT, {"monkey_patch", "clock_patched"}),
    "racy": (Status.CORRECT, {"non_deterministic"}),
    "bf16_inside": (Status.CORRECT, {"low_accuracy"}),
}


def test_adversarial_verdicts_on_cuda(tmp_path):
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", FIXTURES / "adversarial")
    solutions = {"tiny": [s for s in solutions["tiny"] if s.name in CUDA_CASES or s.name == "side_stream"]}
    store = execute(_config(tmp_path, compile_baseline=False, atol=2e-2, rtol=2e-2), problems, solutions, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    for name, (status, flags) in CUDA_CASES.items():
        assert rows[name].status == status, (name, rows[name].message, rows[name].warnings)
        assert flags <= set(rows[name].flags), (name, rows[name].warnings)
    patched, honest = rows["patches_timers"], rows["pytorch_only"]
    assert patched.timing.median > honest.timing.median / 3  # the fake Event's 0 ms was not used
    assert rows["pytorch_only"].kernels.profiled is False  # nothing declared: no profile to run
    # Microseconds of work on a side stream hide in the noise of a microsecond problem: the class is caught on the
    # millisecond problem (test_attack_classes_on_cuda); here it is flagged statically and never reported faster.
    side = rows["side_stream"]
    assert "new_stream" in side.flags and (side.speedup_vs_eager is None or side.speedup_vs_eager <= HONEST_SPEEDUP)


def test_shipped_solutions_spend_their_time_in_their_own_kernels_and_raise_no_flags(tmp_path, build_cache):
    problems, solutions = select(SHIPPED, [], ROOT / "problems", ROOT / "solutions")
    solutions = {p: [s for s in group if s.name in ("cuda_fused", "tf32_igemm", "triton_fused")]
                 for p, group in solutions.items()}
    store = execute(_config(tmp_path, build_cache, compile_baseline=False), problems, solutions, Path.cwd())
    for e in store.evaluations:
        assert e.status == Status.CORRECT, (e.problem, e.solution, e.message)
        assert set(e.flags) - MACHINE_CODES == set(), (e.problem, e.solution, e.warnings)
        assert 0 < e.percent_of_floor <= 100, (e.problem, e.solution, e.floor)  # floor from measured ceilings
        if e.solution in ("cuda_fused", "triton_fused"):  # cuDNN's convolution plus one kernel of its own
            assert 0 < e.kernels.own_share < 1, e.kernels
        if e.solution == "tf32_igemm":  # the convolution itself is the solution's kernel
            assert e.kernels.own_share > 0.9, e.kernels
        if e.solution != EAGER:
            assert e.size_checks["small"] and all(t.passed for t in e.size_checks["small"])
            accuracy = e.accuracy  # TF32 arithmetic, within what TF32 rounding costs the reference
            assert accuracy.solution <= max(10 * accuracy.reference, 3 * accuracy.tf32), accuracy


def test_a_bf16_run_casts_both_sides_and_skips_the_float_only_solutions(tmp_path, build_cache):
    problems, solutions = select(["conv3d_gelu"], [], ROOT / "problems", ROOT / "solutions")
    config = _config(tmp_path, build_cache, compile_baseline=False, precision="bf16")
    rows = {e.solution: e for e in execute(config, problems, solutions, Path.cwd()).evaluations}
    assert {e.precision for e in rows.values()} == {"bf16"}
    assert rows[EAGER].status == Status.CORRECT
    assert rows["triton_fused"].status == Status.CORRECT, rows["triton_fused"].message  # loads in bf16, math in fp32
    for name in ("cuda_fused", "tf32_igemm"):
        assert rows[name].status == Status.NOT_RUN and "PRECISIONS fp32" in rows[name].message


@pytest.mark.parametrize("name, module", [("tilelang_fused", "tilelang"), ("cute_fused", "cutlass.cute")])
def test_a_kernel_dsl_solution_runs_end_to_end_with_its_kernel_counted_as_its_own(tmp_path, build_cache, name, module):
    pytest.importorskip(module, reason=f"{module} is not installed in this Python (kbench's extra for it)")
    problems, solutions = select(["conv3d_gelu"], [name], ROOT / "problems", ROOT / "solutions")
    rows = {e.solution: e for e in execute(_config(tmp_path, build_cache, compile_baseline=False), problems,
                                            solutions, Path.cwd()).evaluations}
    row = rows[name]
    assert row.status == Status.CORRECT, row.message
    assert set(row.flags) - MACHINE_CODES == set(), row.warnings
    assert 0 < row.kernels.own_share < 1, row.kernels  # cuDNN's convolution, then its kernel
    # the DSL compiled in the untimed calls: no timed sample carries a compilation (seconds, against milliseconds)
    assert max(row.timing.samples) < 3 * row.timing.median, row.timing.samples


def test_the_noise_check_names_tf32_where_it_puts_the_reference_beyond_kernelbenchs_1e_4():
    """On the H100, convtranspose3d_layernorm's reference is 2.8e-3 from float64 with cuDNN's TF32 on, 2.3e-6 off."""
    from kbench.commands.build_and_check import check_problems

    (on,) = check_problems(["convtranspose3d_layernorm"], ROOT / "problems", "cuda", "full", 600, profile="kernelbench")
    assert any(f.code == FindingCode.TOLERANCE_BELOW_NOISE and "TF32" in f.message for f in on.findings), on.findings
    (off,) = check_problems(["convtranspose3d_layernorm"], ROOT / "problems", "cuda", "full", 600, profile="kernelbench",
                            tf32=False)
    assert not any(f.code == FindingCode.TOLERANCE_BELOW_NOISE for f in off.findings), off.findings
    assert off.noise.max_abs < on.noise.max_abs


def test_shipped_problems_are_not_degenerate_at_full_size():
    from kbench.commands.build_and_check import check_problems

    for check in check_problems(SHIPPED, ROOT / "problems", "cuda", "full", 600):
        assert check.error == "" and check.findings == (), (check.problem.name, check.findings, check.output, check.noise)


# The attack classes on CUDA (the CPU verdicts are in test_adversarial.TIMED_CASES), on a problem of a few ms per call.
CUDA_TIMED_CASES = {
    **TIMED_CASES,
    "cudnn_off_at_import": (Status.SUSPECT, {"state_changed"}),
    "tf32_at_import": (Status.SUSPECT, {"state_changed"}),
    "side_stream": (Status.SUSPECT, {"timer_mismatch"}),
}
MAY_BE_SUSPECT = {"busy_thread", "busy_python_thread", "launches_from_thread"}  # a busy neighbour may or may not show; no speedup either way
# Side-stream work is not behind the gate of a GPU-regime call: it may run on the last round's inputs before the
# release, and then the judge's check finds the outputs wrong (`incorrect`, seen on the H100 on 2026-11-26), or on this
# round's, and then the judge's clock finds the time too low (`suspect`). Never `correct`.
EITHER_CAUGHT = {"side_stream": {Status.SUSPECT, Status.INCORRECT},
                 # The timed fixture's call is big enough (kbench.judge.judge.AFTER_MIN_BYTES) that the candidate's
                 # process keeps the reference it built before the import, for the check after the rounds: the gc scan
                 # finds that full-size model and calls it with the small size's inputs (`runtime_error`, seen on an
                 # H200 on 2026-11-28), or finds none (`incorrect`). At the full size it would be an honest copy.
                 "reads_gc_models": {Status.INCORRECT, Status.RUNTIME_ERROR}}


def test_attack_classes_on_cuda(tmp_path):
    problems, solutions = select(["timed"], [], FIXTURES / "problems", FIXTURES / "adversarial")
    store = execute(_config(tmp_path, compile_baseline=False, kernel_profile=False), problems, solutions, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    for name, (status, flags) in CUDA_TIMED_CASES.items():
        row = rows[name]
        if name in MAY_BE_SUSPECT:
            assert row.status in (Status.CORRECT, Status.SUSPECT), (name, row.status, row.message)
        elif name in EITHER_CAUGHT:
            assert row.status in EITHER_CAUGHT[name], (name, row.status, row.message)
            assert row.status == Status.INCORRECT or flags <= set(row.flags), (name, row.warnings)
        else:
            assert row.status == status, (name, row.status, row.message, row.warnings)
            assert flags <= set(row.flags), (name, row.warnings)
        assert row.speedup_vs_eager is None or row.speedup_vs_eager <= HONEST_SPEEDUP, (name, row.speedup_vs_eager)
    thread = rows["launches_from_thread"]
    assert thread.status == Status.SUSPECT or thread.speedup_vs_eager <= HONEST_SPEEDUP


def test_a_launch_bound_model_is_named_so_and_its_honest_copy_is_not_faster(tmp_path):
    """Many tiny ops: the host's issue time is the call's time. Its level follows the host CPU's speed, which on the
    H100 machine moves by up to 1.8x from one second to the next (bench/launch_bound.py --blocks): the eager time in
    the reference's own process need not match the one beside the solution, but the solution's speedup is taken
    against the eager calls interleaved with its own, in primed rounds (each side's timed call right after an untimed
    call of its own), so an honest copy is not faster: 0.95-1.05x over eight H100 rows, where without priming the
    candidate's call, coming right after the judge's call of the same code, measured 1.03-1.10x in every run."""
    problems, solutions = select(["tiny_ops"], [], FIXTURES / "problems", FIXTURES / "solutions")
    store = execute(_config(tmp_path, compile_baseline=False), problems, solutions, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    honest, eager = rows["honest"], rows[EAGER]
    assert honest.status == Status.CORRECT, (honest.message, honest.warnings)
    assert "launch_bound" in honest.flags and "launch_bound" in eager.flags, (honest.warnings, eager.warnings)
    assert honest.diagnostics.protocol.primed is True and eager.diagnostics.primed is True
    assert honest.speedup_vs_eager <= HONEST_SPEEDUP, honest.speedup_vs_eager


def test_an_honest_copy_of_a_call_whose_speed_moves_with_its_memory_reads_one(tmp_path):
    """The `placed` fixture (KernelBench level 2's #77 shape) ran 4.9 or 6.4 ms by where its 212 MB intermediate lay,
    and its honest copies read 0.77x or 1.30x `correct` on one H200 (2026-11-28). Both sides now draw their memory
    every few rounds and are timed on their fastest draws (kbench.judge.timing.placement): each of four copies is
    `correct` within 1.00 +- 0.03, with the draws in its figures, and the reference kept in the candidate's process
    agrees with the judge's after the solution's rounds."""
    solutions = tmp_path / "solutions" / "placed"
    solutions.mkdir(parents=True)
    for i in range(4):
        shutil.copy(FIXTURES / "solutions" / "placed" / "honest.py", solutions / f"honest_{i}.py")
    problems, found = select(["placed"], [], FIXTURES / "problems", tmp_path / "solutions")
    store = execute(_config(tmp_path, compile_baseline=False), problems, found, Path.cwd())
    rows = [e for e in store.evaluations if e.solution.startswith("honest")]
    assert len(rows) == 4
    for row in rows:
        drawn = row.diagnostics.protocol.placements
        # PROBE_GROUPS draws at least; GROUPS only where a side's speed moved in those (placement.drew_on): 7 and 10
        # groups on #77's rows of level 2 on two H200s (2026-11-28), where this asked for 8 and failed
        assert drawn is not None and drawn.groups >= placement.PROBE_GROUPS, row.diagnostics.protocol
        assert (not placement.drew_on(drawn) or drawn.draws >= placement.GROUPS
                or row.timing.stop_reason == STOP_MAX_TIME), drawn
        assert row.diagnostics.processes.after is not None, row.diagnostics.processes
        assert row.status == Status.CORRECT, (row.status, [str(w) for w in row.warnings], drawn,
                                               row.diagnostics.processes)
        assert abs(row.speedup_vs_eager - 1) <= 0.03, (row.speedup_vs_eager, drawn, row.diagnostics.processes)


FIDELITY = ["convtranspose3d_softmax", "conv3d_logsumexp"]  # the two shortest tf32_igemm calls (0.36 and 0.98 ms)


def test_kbench_agrees_with_the_same_call_timed_in_one_plain_process(tmp_path, build_cache):
    """Timing v3's fidelity rule on two shipped solutions: kbench's median within 3% of its own timer called directly in
    a fresh process (the row's regime), and within 5% of Triton's do_bench (bench/fidelity.py has the whole table)."""
    from bench.fidelity import _in_child

    problems, solutions = select(FIDELITY, [], ROOT / "problems", ROOT / "solutions")
    solutions = {p: [s for s in group if s.name == "tf32_igemm"] for p, group in solutions.items()}
    store = execute(_config(tmp_path, build_cache, compile_baseline=False), problems, solutions, Path.cwd())
    for row in (e for e in store.evaluations if e.solution == "tf32_igemm"):
        assert row.status == Status.CORRECT and row.timing.regime == "gpu", (row.message, row.warnings)
        plain = _in_child("one_process", row.problem, "tf32_igemm", "gpu", str(build_cache))
        assert abs(row.timing.median * 1e3 / plain["one_process_ms"] - 1) <= 0.03, (row.problem, row.timing.median, plain)
        assert abs(row.timing.median * 1e3 / plain["do_bench_ms"] - 1) <= 0.05, (row.problem, row.timing.median, plain)


def test_the_judges_own_gpu_bracket_holds_each_call_and_costs_a_steady_excess(tmp_path, build_cache, monkeypatch):
    """Issue 40's judge-owned clock, measured (KBENCH_JUDGE_BRACKET=1): on the two shortest shipped calls the judge's
    stream's events around the gate's opening and the DONE word hold every timed call (the bracket exceeds the
    reported time), by an excess under a millisecond whose spread over the rounds (10th to 90th percentile) is printed
    for docs/benchmarks.md; the rows stay `correct` within 3% of the same call in one plain process."""
    from bench.fidelity import _in_child
    from kbench.judge.timing.timed_call import BRACKET_ENV

    monkeypatch.setenv(BRACKET_ENV, "1")
    problems, solutions = select(FIDELITY, [], ROOT / "problems", ROOT / "solutions")
    solutions = {p: [s for s in group if s.name == "tf32_igemm"] for p, group in solutions.items()}
    store = execute(_config(tmp_path, build_cache, compile_baseline=False), problems, solutions, Path.cwd())
    for row in (e for e in store.evaluations if e.solution == "tf32_igemm"):
        assert row.status == Status.CORRECT and row.timing.regime == "gpu", (row.message, row.warnings)
        protocol = row.diagnostics.protocol
        excess = sorted(protocol.bracket_excess_s)
        assert len(excess) >= len(row.timing.samples) and protocol.calibration_bracket_p50_s is not None, protocol
        assert 0 < excess[0] and excess[len(excess) // 2] < 1e-3, excess
        print(f"{row.problem}: median {row.timing.median * 1e3:.4f} ms; bracket excess p10/p50/p90 "
              f"{excess[len(excess) // 10] * 1e6:.1f}/{excess[len(excess) // 2] * 1e6:.1f}/"
              f"{excess[9 * len(excess) // 10] * 1e6:.1f} us, calibration p50 "
              f"{protocol.calibration_bracket_p50_s * 1e6:.1f} us")
        plain = _in_child("one_process", row.problem, "tf32_igemm", "gpu", str(build_cache))
        assert abs(row.timing.median * 1e3 / plain["one_process_ms"] - 1) <= 0.03, (row.problem, row.timing.median, plain)


def _shaved_problem(root: Path, batch: int) -> Path:
    """The shaved fixture problem written under `root`/shaved with `batch` rows (its own: 2048); the problems folder."""
    folder = root / "shaved"
    folder.mkdir(parents=True)
    source = (FIXTURES / "problems" / "shaved" / "model.py").read_text()
    assert "batch_size = 2048" in source
    (folder / "model.py").write_text(source.replace("batch_size = 2048", f"batch_size = {batch}"))
    shutil.copy(FIXTURES / "problems" / "shaved" / "problem.toml", folder / "problem.toml")
    return root


# The judge's clock resolves a shave to some tens of microseconds a call on the H100: the protocol's cost (its window
# less the reported time) differed by up to 48 us between candidate processes in the same run (2026-11-27). At the
# fixture's size (0.37 ms a call) half a call always stood out, while a tenth (37 us) got through once or twice in two
# runs of five; at batch 8192 (four times the work, 1.46 ms) a tenth of a call is about 150 us. docs/timing.md,
# "What the judge's clock can resolve".
@pytest.mark.parametrize(("batch", "shares"), [(2048, ("50",)), (8192, ("10", "50"))])
def test_every_shave_beyond_the_judges_resolution_is_suspect_on_cuda_and_the_honest_copy_is_not(tmp_path, batch,
                                                                                                shares):
    from tests.shaves import write_shaves

    written = write_shaves(tmp_path / "solutions" / "shaved")
    names = [n for n in written if n.rsplit("_", 1)[1] in shares]
    for other in set(written) - set(names):
        (tmp_path / "solutions" / "shaved" / f"{other}.py").unlink()
    problems, solutions = select(["shaved"], [], _shaved_problem(tmp_path / "problems", batch), tmp_path / "solutions")
    store = execute(_config(tmp_path, compile_baseline=False), problems, solutions, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    seen = {name: (row.status.value, row.timing.regime if row.timing else None, row.warnings) for name, row in rows.items()}
    assert set(rows) == {EAGER, "honest_copy", *names}, sorted(rows)
    for name in names:
        assert rows[name].status == Status.SUSPECT and "timer_mismatch" in rows[name].flags, (name, seen[name])
    honest = rows["honest_copy"]
    assert honest.status == Status.CORRECT and "timer_mismatch" not in honest.flags, honest.warnings
    assert abs(honest.speedup_vs_eager - 1) <= 0.03, honest.speedup_vs_eager


WRONG_BACKWARDS = ("wrong_backward", "caches_gradients", "detached", "wrong_gradient_shape")


def _wide_backward_fixtures(root: Path) -> tuple[Path, Path]:
    """The tiny problem and its backward fixtures at a GPU-bound size (batch 8192, 2048 features: about 4 ms of
    GEMMs forward and backward), written under `root`: problems/wide, solutions/wide."""
    problems, solutions = root / "problems" / "wide", root / "solutions" / "wide"
    problems.mkdir(parents=True)
    solutions.mkdir(parents=True)
    source = (FIXTURES / "problems" / "tiny" / "model.py").read_text()
    source = source.replace("batch_size = 64", "batch_size = 8192").replace("features = 32", "features = 2048")
    assert "batch_size = 8192" in source and "features = 2048" in source
    (problems / "model.py").write_text(source)
    (problems / "problem.toml").write_text('origin = "kbench test fixture"\natol = 1e-4\nrtol = 1e-4\n')
    for fixture in (FIXTURES / "backward" / "tiny").glob("*.py"):
        (solutions / fixture.name).write_text(fixture.read_text())
    return problems.parent, solutions.parent


def test_backward_fixtures_get_their_verdicts_on_cuda(tmp_path):
    """--backward on the GPU, on a GPU-bound call: honest copies (autograd's and a custom Function's) correct; a
    wrong backward, a backward that caches its first gradient, a detached output and a gradient of the wrong shape
    incorrect."""
    problems_dir, solutions_dir = _wide_backward_fixtures(tmp_path)
    problems, solutions = select(["wide"], [], problems_dir, solutions_dir)
    store = execute(_config(tmp_path, compile_baseline=False, backward=True), problems, solutions, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    for name in (EAGER, "honest_copy", "honest_function"):
        assert rows[name].status == Status.CORRECT and rows[name].backward, (name, rows[name].message)
    for name in WRONG_BACKWARDS:
        assert rows[name].status == Status.INCORRECT, (name, rows[name].status, rows[name].message)


def test_backward_fixtures_on_a_launch_bound_call_are_never_wrongly_judged(tmp_path):
    """The tiny problem's forward and backward is launch-bound (about 0.5 ms of small kernels): the fixtures that do
    more host work per call than the reference (more autograd nodes, a Python backward) are truly slower there, and
    the judge's clock may see some of their work land after their events (`suspect`, docs/judge.md, "Backward").
    Whatever the timing says, no honest fixture is incorrect or faster than eager, and every wrong one is incorrect."""
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", FIXTURES / "backward")
    store = execute(_config(tmp_path, compile_baseline=False, backward=True), problems, solutions, Path.cwd())
    rows = {e.solution: e for e in store.evaluations}
    assert rows[EAGER].status == Status.CORRECT, rows[EAGER].message
    for name in ("honest_copy", "honest_function"):
        assert rows[name].status in (Status.CORRECT, Status.SUSPECT), (name, rows[name].status, rows[name].message)
        speedup = rows[name].speedup_vs_eager
        assert speedup is None or speedup <= HONEST_SPEEDUP, (name, speedup)
    for name in WRONG_BACKWARDS:
        assert rows[name].status == Status.INCORRECT, (name, rows[name].status, rows[name].message)


def test_the_shipped_backward_solution_is_correct_and_faster_forward_and_backward(tmp_path, build_cache):
    problems, solutions = select(["conv3d_gelu"], ["triton_backward"], ROOT / "problems", ROOT / "solutions")
    store = execute(_config(tmp_path, build_cache, compile_baseline=False, backward=True), problems, solutions,
                    Path.cwd())
    row = next(e for e in store.evaluations if e.solution == "triton_backward")
    assert row.status == Status.CORRECT and row.backward and row.size == "full", row.message
    assert row.speedup_vs_eager > 1.0, row.speedup_vs_eager
    assert not set(row.flags) & SUSPECT_CODES, row.warnings
