"""The child's extra checks: a check of the harness's own that cannot run is skipped, not a failure."""

from pathlib import Path

import torch
import torch.nn as nn

from kbench.judge.draft import Draft
from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.judge.checks import kernel_names, trust


class NoDouble(nn.Module):
    """A reference that cannot be converted to float64 (as when float64 would not fit in memory)."""

    def forward(self, x):
        return x * 2

    def double(self):
        raise RuntimeError("CUDA out of memory (simulated)")


def _run_trust(model, candidate, make, result, tf32=False):
    """What the judge does after timing, with a candidate of this process: determinism, then the float64 oracle."""
    first, ref_first, warning = trust.determinism(lambda x: candidate(*x), lambda x: candidate(*x), model, make, 1, "cpu")
    if warning is not None:
        result.warnings.append(warning)
    trust.accuracy(model, make(1), first, ref_first, "cpu", tf32, result)


class Twice(nn.Module):
    def forward(self, x):
        return x * 2


def test_an_accuracy_check_that_cannot_run_is_skipped_with_a_warning():
    result = Draft()
    _run_trust(NoDouble(), lambda x: x * 2, lambda seed: [torch.rand(8)], result)
    assert result.row.accuracy is None
    assert [w.text for w in result.warnings] == [
        "[check_skipped] float64 accuracy could not run: RuntimeError: CUDA out of memory (simulated)"]


def test_the_float64_oracle_is_skipped_when_its_estimate_exceeds_the_free_memory(monkeypatch):
    torch.manual_seed(0)  # a float32 product over 1024 terms errs by about 1e-6 against float64: fixed inputs
    model = nn.Linear(1024, 1024)
    inputs = [torch.rand(256, 1024)]
    out = model(*inputs)
    need = trust.fp64_memory_estimate(model, inputs, out)
    assert need == 2 * 4 * (256 * 1024 + 1024 * 1024 + 1024) + 8 * trust.FP64_OUTPUT_COPIES * out.numel()
    monkeypatch.setattr(trust, "free_bytes", lambda device: int(need * trust.FP64_HEADROOM) - 1)
    result = Draft()
    trust.accuracy(model, inputs, out, out, "cuda", False, result)
    assert result.row.accuracy is None and result.warnings[0].text.startswith("[check_skipped] float64 accuracy needs about")
    monkeypatch.setattr(trust, "free_bytes", lambda device: int(need / trust.FP64_HEADROOM) + 1)
    result = Draft()
    trust.accuracy(model, inputs, out, out, "cpu", False, result)
    assert result.warnings == [] and result.row.accuracy.solution == result.row.accuracy.reference < 1e-5


def test_accuracy_and_determinism_of_an_honest_candidate():
    result = Draft()
    model = nn.Linear(8, 8)
    _run_trust(model, lambda x: model(x), lambda seed: (torch.manual_seed(seed), [torch.rand(4, 8)])[1], result)
    assert result.warnings == []
    assert result.row.accuracy.solution == result.row.accuracy.reference < 1e-6


def test_a_candidate_that_differs_between_two_calls_on_the_same_inputs_is_flagged():
    calls = []

    def racy(x):
        calls.append(1)
        return x * 2 + (1e-3 if len(calls) % 2 == 0 else 0.0)  # every second call is off

    result = Draft()
    _run_trust(Twice(), racy, lambda seed: (torch.manual_seed(seed), [torch.rand(16)])[1], result)
    assert [w.code for w in result.warnings] == [FindingCode.NON_DETERMINISTIC]


def test_round_to_tf32_keeps_ten_mantissa_bits_rounding_to_nearest():
    x = torch.tensor([1 + 2**-11, 1 + 2**-12, -(1 + 3 * 2**-11), 3.0, float("inf"), float("nan")])
    r = trust.round_to_tf32(x)
    assert r[:4].tolist() == [1 + 2**-10, 1.0, -(1 + 2 * 2**-10), 3.0]
    assert r[4] == float("inf") and torch.isnan(r[5])
    y = torch.randn(10_000)
    ry = trust.round_to_tf32(y)
    assert (ry.view(torch.int32) & ((1 << 13) - 1)).eq(0).all()
    assert ((ry - y).abs() <= y.abs() * 2**-11).all()


def _flags(candidate_of, tf32):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh())
    result = Draft()
    _run_trust(model, candidate_of(model), lambda seed: (torch.manual_seed(seed), [torch.rand(32, 64)])[1], result, tf32)
    return result


def _tf32_candidate(model):
    lin = model[0]
    return lambda x: torch.tanh(trust.round_to_tf32(x) @ trust.round_to_tf32(lin.weight).t() + lin.bias)


def _bf16_candidate(model):
    lin = model[0]
    return lambda x: torch.tanh(x.bfloat16() @ lin.weight.bfloat16().t() + lin.bias.bfloat16()).float()


def test_tf32_arithmetic_is_not_low_accuracy_where_the_run_allows_tf32():
    allowed = _flags(_tf32_candidate, tf32=True)
    assert allowed.warnings == []
    assert allowed.row.accuracy.solution > 10 * allowed.row.accuracy.reference  # fp32 reference: far more exact
    assert allowed.row.accuracy.solution <= trust.TF32_SLACK * allowed.row.accuracy.tf32
    barred = _flags(_tf32_candidate, tf32=False)
    assert barred.row.accuracy.tf32 is None
    assert [w.code for w in barred.warnings] == [FindingCode.LOW_ACCURACY]


def test_bf16_arithmetic_stays_low_accuracy_even_with_tf32_allowed():
    result = _flags(_bf16_candidate, tf32=True)
    assert [w.code for w in result.warnings] == [FindingCode.LOW_ACCURACY]
    assert "TF32 rounding" in result.warnings[0].message


def test_declared_kernels_finds_each_spelling_of_a_kernel_declaration():
    source = """
    __global__ void plain(float* x) {}
    __global__ __launch_bounds__(256) void bounds_first(float* x) {}
    __global__ void __launch_bounds__(THREADS, 2)
    bounds_after(const float* __restrict__ x) {}
    template <int TD>
    __global__ static void templated_static (float* x) {}
    __device__ void helper(float* x) {}
    """
    assert kernel_names.declared_kernels(source) == {"plain", "bounds_first", "bounds_after", "templated_static"}
    solutions = Path(__file__).parent.parent / "solutions"
    assert kernel_names.declared_kernels((solutions / "conv3d_gelu" / "tf32_igemm.py").read_text()) == {"conv3d_tf32_gelu"}
    softmax = (solutions / "convtranspose3d_softmax" / "tf32_igemm.py").read_text()
    assert kernel_names.declared_kernels(softmax) == {"pack_transposed", "convt3d_tf32_softmax_sigmoid", "scan_wrap"}
    lse = (solutions / "conv3d_logsumexp" / "tf32_igemm.py").read_text()
    assert kernel_names.declared_kernels(lse) == {"pack_slabs", "conv3d_tf32_pool_lse", "scan_wrap"}


def _job(device, **settings):
    from kbench.wire.jobs import CheckJob, ProblemRef

    return CheckJob(problem=ProblemRef("p", "p.py"), device=device, seed=0, trials=1, atol=1e-4, rtol=1e-4, **settings)


def test_the_kernel_profile_runs_on_cuda_unless_the_run_turns_it_off():
    assert trust.wants_kernel_profile(_job("cuda"))
    assert trust.wants_kernel_profile(_job("cuda", kernel_profile=True))
    assert not trust.wants_kernel_profile(_job("cuda", kernel_profile=False))
    assert not trust.wants_kernel_profile(_job("cpu", kernel_profile=True))


def test_a_kernel_share_from_the_candidate_is_checked_field_by_field():
    """The profile's figures come from the candidate's process: anything but a KernelShare is a skipped check."""
    forged = Draft()
    trust.kernel_profile(lambda: {"own_s": "all of it", "own_share": [1.0]}, forged)
    assert forged.row.kernels is None
    assert forged.warnings[0].text.startswith("[check_skipped] kernel profile could not run: ProtocolError")
    honest = Draft()
    trust.kernel_profile(lambda: {"own_s": 0.0, "library_s": 1e-3, "own_share": 0.0, "kernels_declared": ["k"],
                                  "top": [["cudnn_conv", 9.5]]}, honest)
    assert honest.row.kernels.top == (("cudnn_conv", 9.5),) and honest.row.kernels.own_share == 0.0
    assert honest.warnings[0].code == "no_custom_kernel"


def test_the_kernel_profile_covers_the_candidate_calls_and_nothing_else(monkeypatch):
    """Only call(*args) runs inside the profile, once per prepared argument set: the harness's input copies (which
    dominate when a solution is fast and its input large) are made before it and are not counted as library time."""
    import torch.profiler

    log = []

    class FakeProfile:
        def __init__(self, **kw):
            pass

        def __enter__(self):
            log.append("start")
            return self

        def __exit__(self, *exc):
            log.append("stop")

        def events(self):
            return []

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))  # no GPU here
    arg_sets = [[torch.ones(2)], [torch.zeros(2)], [torch.full((2,), 2.0)]]
    share = trust.own_kernel_share(lambda x: log.append(x), arg_sets, "__global__ void k(float* x) {}")
    assert log[0] == "start" and log[-2:] == ["sync", "stop"] and len(log) == 6
    assert all(got is args[0] for got, args in zip(log[1:4], arg_sets))  # the prepared tensors, not copies made inside
    assert share["kernels_declared"] == ["k"] and share["own_s"] == 0 and share["own_share"] == 0.0


class _Dropout(nn.Module):
    """A training-mode dropout: every call draws a new mask (level-2 problems have them)."""

    def __init__(self, generator=None):
        super().__init__()
        self.generator = generator

    def forward(self, x):
        mask = torch.rand(x.shape, generator=self.generator) > 0.2
        return x * mask / 0.8


def test_an_honest_copy_of_a_random_reference_is_not_called_non_deterministic():
    """The candidate's process draws its own random numbers; the judge's input maker reseeds the judge's before each
    call, so the reference drew the same dropout mask twice and an honest copy read as 'a race?' (issue: suite
    reports). Each call now gets a fresh random state; a random candidate of a deterministic reference is still
    flagged."""
    def make(seed):
        torch.manual_seed(seed)
        return [torch.rand(64, 64)]

    candidate = _Dropout(torch.Generator().manual_seed(7))  # its own state, as in a process of its own
    *_, warning = trust.determinism(lambda x: candidate(*x), lambda x: candidate(*x), _Dropout(), make, 1, "cpu")
    assert warning is None
    *_, warning = trust.determinism(lambda x: candidate(*x), lambda x: candidate(*x), nn.Identity(), make, 1, "cpu")
    assert warning is not None and warning.code == FindingCode.NON_DETERMINISTIC
    assert "a race, or randomness the reference does not draw" in warning.message
