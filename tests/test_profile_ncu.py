"""kbench profile's reading of Nsight Compute's CSV, on output captured on an H100 (tests/fixtures/ncu/), no GPU."""

import pytest

from kbench.errors import KbenchError, ProfileError, UsageError
from kbench.profile import ncu
from kbench.results.profiles import LATENCY_BELOW_PCT, Limit, closest_limit
from tests.conftest import FIXTURES

SAMPLES = FIXTURES / "ncu"
# (kernels, summed duration in ms) of each sample; kbench's timed medians on the same H100 were 11.39, 2.69, 2.88 and
# 0.358 ms.
EXPECTED = {"conv3d_gelu_eager": (6, 11.372), "conv3d_gelu_tf32_igemm": (5, 2.713),
            "convtranspose3d_softmax_eager": (7, 2.849), "convtranspose3d_softmax_tf32_igemm": (4, 0.353)}


def _sample(name):
    return ncu.parse((SAMPLES / f"{name}.csv").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_sample_gives_its_kernels_and_their_summed_duration(name):
    kernels = _sample(name)
    count, total_ms = EXPECTED[name]
    assert len(kernels) == count
    assert sum(k.duration_ns for k in kernels) / 1e6 == pytest.approx(total_ms, abs=1e-3)


def test_a_kernel_row_is_read_in_base_units_with_thousands_separators():
    first = _sample("conv3d_gelu_eager")[0]
    assert first.name.startswith("sm80_xmma_fprop_implicit_gemm")
    assert first.duration_ns == 4_947_584  # "4,947,584" ns
    assert first.dram_bytes_per_s == pytest.approx(406_392_466_302.74)  # "406,392,466,302.74" byte/s
    assert (first.dram_pct, first.sm_pct, first.memory_pct, first.occupancy_pct) == (12.12, 85.65, 41.64, 12.46)
    assert (first.registers_per_thread, first.block_size, first.grid_size) == (255, 128, 26908)
    assert first.shared_mem_per_block == 33280  # static + dynamic
    assert first.limit == Limit.COMPUTE


def test_the_solutions_fused_kernel_and_the_eager_elementwise_kernels_are_classified():
    fused = max(_sample("conv3d_gelu_tf32_igemm"), key=lambda k: k.duration_ns)
    assert "conv3d_tf32_gelu" in fused.name and fused.tensor_pct == 23.2 and fused.limit == Limit.COMPUTE
    elementwise = _sample("conv3d_gelu_eager")[1:]
    assert {k.limit for k in elementwise} == {Limit.MEMORY}
    fills = [k for k in _sample("convtranspose3d_softmax_tf32_igemm") if "Fill" in k.name]
    assert fills and fills[0].limit == Limit.LATENCY


def test_the_limit_rule():
    assert closest_limit(80, 20) == Limit.MEMORY
    assert closest_limit(20, 80) == Limit.COMPUTE
    assert closest_limit(LATENCY_BELOW_PCT - 1, LATENCY_BELOW_PCT - 2) == Limit.LATENCY
    assert closest_limit(LATENCY_BELOW_PCT, None) == Limit.MEMORY
    assert closest_limit(None, None) == Limit.UNKNOWN


def _table(*rows, units=('""', '"ns"', '"%"', '"Kbyte/block"')):
    header = '"ID","Kernel Name","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed",' \
             '"launch__shared_mem_per_block_static"'
    return "\n".join(["==PROF== Connected to process 1", "a line the target printed", header,
                      '"",' + ",".join(units), *rows, "==PROF== Disconnected from process 1"])


def test_missing_values_are_none_and_units_are_scaled():
    (kernel,) = ncu.parse(_table('"0","k","1,500","n/a","2"'))
    assert kernel.duration_ns == 1500 and kernel.sm_pct is None and kernel.dram_pct is None
    assert kernel.shared_mem_per_block == 2000  # 2 Kbyte: ncu's prefixes are SI
    (slow,) = ncu.parse(_table('"0","k","2.5","",""', units=('""', '"usecond"', '"%"', '"byte/block"')))
    assert slow.duration_ns == 2500 and slow.shared_mem_per_block is None and slow.limit == Limit.UNKNOWN


def test_no_kernels_profiled_is_an_empty_list():
    assert ncu.parse(_table()) == []


@pytest.mark.parametrize("text, words", [
    ("", "no CSV table"),
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n", "ERR_NVGPUCTRPERM"),
    ('"ID","Kernel Name"\n"",""\n"0","k"\n', "no gpu__time_duration.sum column"),
    (_table('"0","k","fast","1","1"'), "not a number"),
    (_table('"0","k","1"'), "row 1 has 3 fields"),
    (_table('"0","k","1","1","1"', units=('""', '"fortnight"', '"%"', '"byte/block"')), "unknown unit"),
    ('"ID","Kernel Name","gpu__time_duration.sum"\n', "no units row"),
])
def test_garbage_is_one_line_of_profile_error(text, words):
    with pytest.raises(ProfileError) as caught:
        ncu.parse(text)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert isinstance(caught.value, KbenchError)


def test_the_command_line_keeps_the_clocks_and_asks_for_every_metric(tmp_path):
    line = ncu.command(tmp_path / "ncu", ["python", "-m", "x"])
    assert line[0] == str(tmp_path / "ncu") and line[-3:] == ["python", "-m", "x"]
    assert line[line.index("--clock-control") + 1] == "none"
    assert line[line.index("--profile-from-start") + 1] == "off"
    assert set(line[line.index("--metrics") + 1].split(",")) == set(ncu.METRICS.values())
    assert "--cache-control" not in line  # the default: caches flushed before each kernel, as kbench's timing does


def test_ncu_is_found_on_path_then_in_the_toolkit(tmp_path, monkeypatch):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "FALLBACKS", ())
    with pytest.raises(UsageError) as caught:
        ncu.find_ncu(tmp_path)
    assert caught.value.exit_code == 2 and "ncu" in str(caught.value)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ncu").write_text("")
    assert ncu.find_ncu(tmp_path) == tmp_path / "bin" / "ncu"
    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/opt/nsight/ncu")
    assert str(ncu.find_ncu(None)) == "/opt/nsight/ncu"
