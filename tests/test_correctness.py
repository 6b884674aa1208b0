import math

import torch

from kbench.correctness import compare, inputs_unchanged, run_trials


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

    trials, warnings = run_trials(make, candidate, reference, [1, 2, 3], 1e-6, 1e-6)
    assert order == ["candidate", "reference"] * 3
    assert all(t.passed for t in trials) and [t.seed for t in trials] == [1, 2, 3]
    assert not torch.equal(seen[0], seen[1])
    assert warnings == ["[modifies_inputs] the solution modifies its inputs in place"]


def test_trials_stop_at_the_first_failure():
    trials, _ = run_trials(lambda s: [torch.ones(2) * s], lambda x: x if x[0] < 2 else -x, lambda x: x, [1, 2, 3], 0, 0)
    assert [t.passed for t in trials] == [True, False]


def test_inputs_unchanged_treats_nan_as_equal():
    a = torch.tensor([float("nan"), 1.0])
    assert inputs_unchanged([a], [a.clone()])
    assert not inputs_unchanged([a], [torch.tensor([float("nan"), 2.0])])
