import math

import torch

import pytest
from torch.profiler import ProfilerActivity, profile

from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.judge.checks import comparison
from kbench.judge.checks.comparison import compare
from kbench.judge.checks.correctness import inputs_unchanged, on_copies, run_trials


def test_equal_and_close_outputs_pass_with_error_figures():
    ref = torch.tensor([1.0, 2.0, 3.0])
    ok, fig = compare(ref + 0.001, ref, atol=1e-2, rtol=0)
    assert ok and fig["mismatched"] == 0 and fig["numel"] == 3
    assert math.isclose(fig["max_abs_err"], 0.001, rel_tol=1e-3)


def test_values_outside_tolerance_fail_and_are_counted():
    ref = torch.zeros(4)
    ok, fig = compare(torch.tensor([0.0, 0.5, 0.0, -0.2]), ref, atol=0.1, rtol=0)
    assert not ok and fig["mismatched"] == 2 and fig["max_abs_err"] == 0.5
    assert "2 of 4 elements" in fig["message"]


def test_rtol_scales_with_the_reference():
    ok, _ = compare(torch.tensor([105.0]), torch.tensor([100.0]), atol=0, rtol=0.1)
    assert ok
    ok, _ = compare(torch.tensor([115.0]), torch.tensor([100.0]), atol=0, rtol=0.1)
    assert not ok


def test_shape_and_dtype_are_checked_first():
    ok, fig = compare(torch.zeros(2, 3), torch.zeros(3, 2), 1, 1)
    assert not ok and "shape (2, 3) != reference (3, 2)" in fig["message"]
    ok, fig = compare(torch.zeros(3, dtype=torch.float64), torch.zeros(3), 1, 1)
    assert not ok and "dtype" in fig["message"]
    ok, fig = compare([torch.zeros(3)], (torch.zeros(3), torch.zeros(3)), 1, 1)
    assert not ok and "returned 1 outputs" in fig["message"]


def test_nan_or_inf_the_reference_lacks_is_a_failure_even_at_huge_tolerance():
    ref = torch.ones(3)
    for bad in (float("nan"), float("inf")):
        ok, fig = compare(torch.tensor([1.0, bad, 1.0]), ref, atol=1e9, rtol=1e9)
        assert not ok and fig["mismatched"] == 1 and fig["max_abs_err"] == float("inf")


def test_matching_nan_and_inf_pass():
    ref = torch.tensor([float("nan"), float("inf"), 1.0])
    ok, _ = compare(ref.clone(), ref, 1e-6, 1e-6)
    assert ok
    ok, _ = compare(torch.tensor([float("nan"), float("-inf"), 1.0]), ref, 1e-6, 1e-6)
    assert not ok


def test_trials_run_candidate_first_on_separate_clones_with_fresh_seeds():
    order, seen = [], []

    def make(seed):
        torch.manual_seed(seed)
        return [torch.rand(4)]

    def candidate(x):
        order.append("candidate")
        seen.append(x.clone())
        x.mul_(0)  # tampering with its own clone must not reach the reference
        return torch.ones(4)

    def reference(x):
        order.append("reference")
        assert x.abs().sum() > 0
        return torch.ones(4)

    trials, warnings = run_trials(make, on_copies(candidate), reference, [1, 2, 3], 1e-6, 1e-6)
    assert order == ["candidate", "reference"] * 3
    assert all(t.passed for t in trials) and [t.seed for t in trials] == [1, 2, 3]
    assert not torch.equal(seen[0], seen[1])
    assert warnings == [Finding(FindingCode.MODIFIES_INPUTS, "the solution modifies its inputs in place")]


def test_trials_stop_at_the_first_failure():
    trials, _ = run_trials(lambda s: [torch.ones(2) * s], on_copies(lambda x: x if x[0] < 2 else -x), lambda x: x,
                           [1, 2, 3], 0, 0)
    assert [t.passed for t in trials] == [True, False]


def test_inputs_unchanged_treats_nan_as_equal():
    a = torch.tensor([float("nan"), 1.0])
    assert inputs_unchanged([a], [a.clone()])
    assert not inputs_unchanged([a], [torch.tensor([float("nan"), 2.0])])


def _awkward_pair(n=50_000):
    """A reference and a candidate with mismatches, NaNs and infinities scattered over the whole range."""
    torch.manual_seed(3)
    ref = torch.randn(n)
    ref[::997] = float("nan")
    ref[5::1009] = float("inf")
    cand = ref + 1e-5 * torch.randn(n)
    cand[123], cand[n - 7], cand[4_000] = 1.0e3, -5.0, float("nan")  # the NaN where the reference is finite
    return cand.reshape(50, -1), ref.reshape(50, -1)


@pytest.mark.parametrize("budget", [1 << 12, 1 << 16, 1 << 20])
def test_a_chunked_comparison_gives_the_figures_of_a_whole_one(budget):
    cand, ref = _awkward_pair()
    whole_ok, whole = compare(cand, ref, 1e-3, 1e-3, budget_bytes=1 << 34)
    ok, fig = compare(cand, ref, 1e-3, 1e-3, budget_bytes=budget)
    assert whole["chunks"] == 1 and fig["chunks"] == -(-cand.numel() // comparison.chunk_elements(budget)) > 1
    assert ok == whole_ok is False
    assert {k: fig[k] for k in ("mismatched", "numel", "max_abs_err", "message")} == \
        {k: whole[k] for k in ("mismatched", "numel", "max_abs_err", "message")}
    assert fig["mismatched"] == 3 and fig["max_abs_err"] == float("inf")


def test_a_non_contiguous_reference_is_compared_element_for_element():
    ref = torch.randn(64, 48).t()  # a transposed view
    cand = ref.contiguous().clone()
    cand[3, 5] += 1.0
    ok, fig = compare(cand, ref, 1e-3, 0, budget_bytes=1 << 12)
    assert not ok and fig["mismatched"] == 1 and fig["max_abs_err"] == pytest.approx(1.0)


def _largest_allocation(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max(e.cpu_memory_usage for e in prof.events())


def test_comparison_memory_is_bounded_by_its_budget():
    """Every allocation the comparison makes fits in the budget: float64 exists only per chunk, never per output."""
    cand, ref = torch.rand(1 << 20), torch.rand(1 << 20)
    budget = 1 << 20  # 1 MiB for an output of 4 MiB (8 MiB in float64)
    assert _largest_allocation(lambda: compare(cand, ref, 1e-2, 1e-2, budget_bytes=budget)) <= budget
    assert _largest_allocation(lambda: compare(cand, ref, 1e-2, 1e-2, budget_bytes=1 << 34)) >= 8 * ref.numel()


def test_the_budget_follows_the_environment_and_sizes_every_check(monkeypatch):
    monkeypatch.setenv(comparison.BUDGET_ENV, str(1 << 16))
    assert comparison.memory_budget("cpu") == 1 << 16
    cand, ref = _awkward_pair()
    assert compare(cand, ref, 1e-3, 1e-3)[1]["chunks"] > 1
    a = torch.rand(1 << 18)
    b = a.clone()
    b[-1] += 0.5
    assert _largest_allocation(lambda: comparison.max_abs_diff(a, b)) <= 1 << 16
    assert comparison.max_abs_diff(a, b) == pytest.approx(0.5)
    assert not comparison.identical(a, b) and comparison.identical(a, a.clone())
    assert not inputs_unchanged([a], [b])
    monkeypatch.delenv(comparison.BUDGET_ENV)
    assert comparison.memory_budget("cpu") == comparison.CPU_CHUNK_BYTES


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("atol, rtol, scale", [(1e-4, 1e-3, 1.0), (1.0, 1e-3, 1e-3), (0.0, 1e-2, 1.0)])
def test_surely_close_never_passes_what_compare_fails(dtype, atol, rtol, scale):
    """The rechecks' fast check may say 'cannot tell', never 'close' for outputs the full comparison fails: elements
    placed just inside, on and just outside their bound (relative steps down to 1e-7 of it: with atol 1 and outputs
    near 1e-3 a float32 step of the bound is that fine), NaN and infinities."""
    generator = torch.Generator().manual_seed(7)
    steps = [0.999, 1 - 1e-6, 1 - 1e-7, 1.0, 1 + 2e-7, 1 + 1e-6, 1 + 1e-5, 1.001]
    for trial in range(3 * len(steps)):
        ref = (torch.randn(4096, generator=generator, dtype=torch.float64) * scale).to(dtype)
        bound = atol + rtol * ref.double().abs()
        sign = torch.sign(torch.randn(4096, generator=generator, dtype=torch.float64))
        cand = (ref.double() + bound * steps[trial % len(steps)] * sign).to(dtype)
        if trial % 7 == 3:
            cand[trial] = float("nan")
        if trial % 7 == 5:
            cand[trial], ref[trial] = float("inf"), float("inf")
        passed, _ = compare(cand, ref, atol, rtol)
        if comparison.surely_close(cand, ref, atol, rtol):
            assert passed, (dtype, trial)


def test_surely_close_passes_close_outputs_and_leaves_the_rest_to_compare():
    ref = torch.randn(1 << 20)
    assert comparison.surely_close(ref + 1e-6, ref, 1e-4, 1e-4)
    assert comparison.surely_close((ref + 1e-6, ref * 2), (ref, ref * 2), 1e-4, 1e-4)  # every output of a tuple
    assert not comparison.surely_close(ref + 1e-2, ref, 1e-4, 1e-4)
    both_nan = ref.clone()
    both_nan[5] = float("nan")
    assert not comparison.surely_close(both_nan, both_nan.clone(), 1e-4, 1e-4) and compare(both_nan, both_nan, 0, 0)[0]
    assert not comparison.surely_close(ref.double(), ref, 1e-4, 1e-4)  # a dtype that differs: compare says why
    assert not comparison.surely_close(ref[:10], ref, 1e-4, 1e-4)
    assert not comparison.surely_close(torch.arange(4), torch.arange(4), 0, 0)  # integers: compare decides
