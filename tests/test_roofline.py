"""The hardware floor on hand-computed values: work of tiny modules, floor, verdicts, the ceiling cache."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from kbench.judge import ceilings as ceiling_bench
from kbench.judge.ceilings import Ceilings, MeasureSizes, cache_path, cached_ceilings, measure_ceilings
from kbench.measure.roofline import Work, floor, floor_findings, percent_of_floor, problem_work
from kbench.results.findings import Finding, FindingCode

F32 = 4  # bytes per float32 element
CEILINGS = Ceilings("Test GPU", bandwidth_bytes_s=1e9, flops_s=1e12, flops_kind="fp32", measured_at="now")
TINY = MeasureSizes(copy_bytes=1 << 20, matmul_n=64, warmup=1, repeats=3)


def test_linear_work_counts_macs_twice_and_every_tensor_once():
    torch.manual_seed(0)
    work = problem_work(nn.Linear(4, 3), [torch.randn(2, 4)])
    assert work.flops == 2 * 2 * 4 * 3
    assert work.bytes == (2 * 4 + 3 * 4 + 3 + 2 * 3) * F32  # input, weight, bias, output


def test_conv3d_work_matches_the_formula():
    n, cin, cout, k, (d, h, w) = 2, 2, 3, 3, (5, 6, 7)
    dout, hout, wout = d - k + 1, h - k + 1, w - k + 1
    work = problem_work(nn.Conv3d(cin, cout, k), [torch.randn(n, cin, d, h, w)])
    assert work.flops == 2 * n * cout * dout * hout * wout * cin * k**3
    elements = n * cin * d * h * w + cout * cin * k**3 + cout + n * cout * dout * hout * wout
    assert work.bytes == elements * F32


class TwoOutputs(nn.Module):
    """No matmul (0 FLOPs), a buffer, a tuple output, and a non-tensor argument."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * self.scale * factor
        return y, y.sum()


def test_buffers_and_tuple_outputs_count_and_elementwise_ops_are_free():
    work = problem_work(TwoOutputs(), [torch.randn(2, 3), 2.0])
    assert work.flops == 0
    assert work.bytes == (6 + 3 + 6 + 1) * F32


def test_meta_device_gives_the_same_work_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = nn.Conv3d(2, 3, 3)
    before = model.weight.detach().clone()
    inputs = [torch.randn(1, 2, 5, 6, 7)]
    assert problem_work(model, inputs, device="meta") == problem_work(model, inputs)
    assert model.weight.device.type == "cpu" and torch.equal(model.weight, before)


def test_floor_is_the_larger_of_memory_and_compute():
    memory = floor(Work(flops=1e9, bytes=2e6), CEILINGS)
    assert (memory.memory_s, memory.compute_s, memory.seconds, memory.bound) == (2e-3, 1e-3, 2e-3, "memory")
    compute = floor(Work(flops=5e9, bytes=1e6), CEILINGS)
    assert (compute.seconds, compute.bound) == (5e-3, "compute")
    assert compute.describe() == "compute-bound: 5.0 GFLOP at 1.0 TFLOP/s fp32"


def test_percent_of_floor():
    fl = floor(Work(flops=0, bytes=2e6), CEILINGS)  # 2 ms
    assert percent_of_floor(4e-3, fl) == pytest.approx(50.0)
    assert percent_of_floor(2e-3, fl) == pytest.approx(100.0)


def test_below_the_floor_warns_with_the_bound():
    fl = floor(Work(flops=0, bytes=2e6), CEILINGS)  # 2 ms, memory-bound
    [finding] = floor_findings(1e-3, None, fl)
    assert finding.code == FindingCode.BELOW_FLOOR and finding.code.suspect  # the row's timing is not trusted
    warning = finding.message
    assert warning.startswith("faster than the hardware floor: 1.000 ms < 2.000 ms")
    assert "(memory-bound: 2.0 MB at 1.0 GB/s)" in warning
    assert "work escaping the timer" in warning


def test_just_below_the_floor_passes_within_tolerance_only():
    fl = floor(Work(flops=0, bytes=2e6), CEILINGS)
    assert floor_findings(1.95e-3, None, fl) == []
    assert len(floor_findings(1.95e-3, None, fl, tolerance=0.0)) == 1


def test_far_faster_than_eager_warns():
    [finding] = floor_findings(2.5e-3, 30e-3, None)
    assert finding == Finding(FindingCode.IMPLAUSIBLE_SPEED, "12.0x faster than eager: review before trusting")
    assert not finding.code.suspect  # a heuristic: a warning only
    assert floor_findings(2.5e-3, 30e-3, None, max_speedup=20.0) == []


def test_plausible_times_and_missing_floor_give_no_warning():
    fl = floor(Work(flops=0, bytes=2e6), CEILINGS)
    assert floor_findings(3e-3, 10e-3, fl) == []
    assert floor_findings(1e-6, None, None) == []


class CountingMeasure:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, device: torch.device, tf32: bool) -> Ceilings:
        self.calls += 1
        return Ceilings(ceiling_bench.device_name(device), 2e10, 3e11, ceiling_bench.flops_kind(device, tf32), "t")


def test_cached_ceilings_measure_once(tmp_path: Path):
    measure = CountingMeasure()
    first = cached_ceilings(tmp_path, torch.device("cpu"), False, measure=measure)
    second = cached_ceilings(tmp_path, torch.device("cpu"), False, measure=measure)
    assert measure.calls == 1
    assert first == second
    assert len(list(tmp_path.glob("ceilings-*.json"))) == 1


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": 1}', "BAD_RATE"])
def test_a_corrupt_cache_file_is_measured_again_and_replaced(tmp_path: Path, text: str):
    measure = CountingMeasure()
    good = cached_ceilings(tmp_path, torch.device("cpu"), False, measure=measure)
    [path] = tmp_path.glob("ceilings-*.json")
    if text == "BAD_RATE":
        doc = json.loads(path.read_text())
        text = json.dumps({**doc, "bandwidth_bytes_s": -1.0})
    path.write_text(text)
    assert cached_ceilings(tmp_path, torch.device("cpu"), False, measure=measure) == good
    assert measure.calls == 2
    assert cached_ceilings(tmp_path, torch.device("cpu"), False, measure=measure) == good
    assert measure.calls == 2  # the rewritten file is read back


def test_cache_file_name_is_sanitized_and_keyed_by_kind(tmp_path: Path):
    tf32 = cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "tf32").name
    fp32 = cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "fp32").name
    assert tf32 != fp32
    assert tf32.startswith("ceilings-NVIDIA_H100_80GB_HBM3-torch") and tf32.endswith("-tf32.json")
    assert not set(tf32) & set(" /+:")


def test_measure_ceilings_on_cpu_gives_positive_finite_rates():
    previous = torch.backends.cuda.matmul.allow_tf32
    ceilings = measure_ceilings(torch.device("cpu"), tf32=True, sizes=TINY)
    for rate in (ceilings.bandwidth_bytes_s, ceilings.flops_s):
        assert math.isfinite(rate) and rate > 0
    assert ceilings.flops_kind == "fp32"  # no TF32 on a CPU
    assert torch.backends.cuda.matmul.allow_tf32 == previous


def test_best_of_repeats_is_the_fastest_sample():
    durations = iter([0.5, 0.25, 0.375])  # exact in binary
    now = [0.0]

    def clock() -> float:
        return now[0]

    def call() -> None:
        now[0] += next(durations)

    sizes = MeasureSizes(copy_bytes=0, matmul_n=0, warmup=0, repeats=3)
    assert ceiling_bench._best_seconds(call, torch.device("cpu"), sizes, clock) == 0.25


def test_meta_device_cannot_be_measured():
    with pytest.raises(ValueError, match="cuda or cpu"):
        measure_ceilings(torch.device("meta"), tf32=False)
