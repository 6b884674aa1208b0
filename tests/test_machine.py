"""A noisy machine is reported: other processes' CPU time while a row is timed, and a level that moved."""

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbench.commands.execute import execute
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.judge.timing.checks import level_moved_warning
from kbench.problems.discovery import select
from kbench.results.diagnostics import GpuState, MachineState
from kbench.results.records import Measurement, Status
from kbench.system import machine, procfs
from tests.conftest import FIXTURES

BUSY_LOOP = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"


def test_other_processes_cpu_time_is_measured_and_the_sessions_own_is_not():
    quiet = machine.snapshot()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # this process's own work: not another process's
        pass
    own = machine.others(quiet, machine.snapshot())
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
    try:
        time.sleep(0.3)
        before = machine.snapshot()
        time.sleep(1.0)
        loaded = machine.others(before, machine.snapshot())
    finally:
        busy.kill()
    assert own.other_cores < 0.5, own
    assert loaded.other_cores >= 0.8, loaded  # one busy loop: about one core
    assert machine.busy_warning(own, "cpu") is None
    warning = machine.busy_warning(loaded, "cpu")
    assert warning is not None and warning.text.startswith(f"[machine_busy] other processes kept {loaded.other_cores:.1f} of ")


def test_on_a_gpu_run_a_quarter_of_the_cores_is_busy():
    state = MachineState(other_cores=3.0, load_average=3.0, window_s=1.0, cores=16.0)
    assert machine.busy_warning(state, "cuda") is None
    assert machine.busy_warning(dataclasses.replace(state, other_cores=4.5), "cuda") is not None
    assert machine.busy_warning(MachineState(), "cpu") is None  # nothing measured (no /proc): nothing said


def test_a_tight_timing_whose_level_moved_is_not_silent():
    steady = Measurement(tuple([1.00e-3, 1.01e-3] * 20))
    moved = Measurement(tuple([1.00e-3] * 20 + [1.40e-3] * 20))  # each half as tight as can be
    assert level_moved_warning(steady, "eager") is None
    warning = level_moved_warning(moved, "the solution")
    assert warning.text.startswith("[level_moved] the solution's time moved from 1.000 ms") and "(1.40x)" in warning.text
    assert level_moved_warning(Measurement(tuple([1e-3] * 5 + [2e-3] * 5)), "x") is None  # too few to tell


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")
def test_a_row_timed_beside_a_synthetic_load_says_so_and_run_json_records_it(tmp_path):
    problems, solutions = select(["tiny"], ["good"], FIXTURES / "problems", FIXTURES / "solutions")
    config = RunConfig(device="cpu", trials=1, timing=TimingPolicy(max_time_s=1.0, min_time_s=1.0),
                       compile_baseline=False, results_dir=tmp_path / "results", cache_dir=tmp_path / "cache")
    loads = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
             for _ in range(max(1, (os.cpu_count() or 1) // 2))]
    try:
        rows = {e.solution: e for e in execute(config, problems, solutions, Path.cwd()).evaluations}
    finally:
        for p in loads:
            p.kill()
    good = rows["good"]
    assert good.status == Status.CORRECT, good.message
    assert "machine_busy" in good.flags, good.warnings
    assert good.diagnostics.machine.other_cores >= 0.5
    assert "machine_busy" in rows["eager"].flags and rows["eager"].diagnostics.machine.other_cores >= 0.5


def _smi(gpu: str | None, apps: str | None):
    """A stand-in for nvidia-smi: its CSV answers to the two queries."""
    def run(args):
        return apps if any(a.startswith("--query-compute-apps") for a in args) else gpu
    return run


def _no_nvml(index):
    return None


def test_the_gpu_is_read_as_nvidia_smi_reports_it():
    state = machine.gpu_state(_smi("1980, 1980, 0x0000000000000000\n", "123\n456\n"), _no_nvml,
                              kbench=lambda pids: len([p for p in pids if p == 456]))
    assert state == GpuState(sm_mhz=1980, max_sm_mhz=1980, throttled=(), compute_processes=2, kbench_elsewhere=1)
    assert machine.gpu_warnings(state, own_processes=2) == []
    assert machine.gpu_state(_smi(None, None), _no_nvml) == GpuState()  # no nvidia-smi: nothing measured, nothing said
    assert machine.gpu_warnings(GpuState(), own_processes=2) == []


class _FakeNvml:
    """The NVML functions Nvml calls, answering through their pointer arguments as the library does."""

    def __init__(self, processes: int, fail: str = ""):
        self.processes, self.fail = processes, fail

    def __getattr__(self, name):
        def call(*args):
            if name == self.fail:
                return 999
            if name == "nvmlDeviceGetClockInfo":
                args[2]._obj.value = 1410
            elif name == "nvmlDeviceGetMaxClockInfo":
                args[2]._obj.value = 1980
            elif name == "nvmlDeviceGetCurrentClocksThrottleReasons":
                args[1]._obj.value = 0x84
            elif name == "nvmlDeviceGetComputeRunningProcesses_v3":
                if args[2] is not None:  # the list asked for: pids 100, 101, ...
                    for i in range(self.processes):
                        args[2][i].pid = 100 + i
                    args[1]._obj.value = self.processes
                    return machine.Nvml.SUCCESS
                args[1]._obj.value = self.processes
                return machine.Nvml.INSUFFICIENT_SIZE if self.processes else machine.Nvml.SUCCESS
            return machine.Nvml.SUCCESS
        return call


def test_nvml_answers_what_nvidia_smi_would_without_a_process_per_row():
    nvml = machine.Nvml()
    nvml._lib = _FakeNvml(processes=3)
    state = nvml.read(0)
    assert state == (GpuState(sm_mhz=1410, max_sm_mhz=1980, throttled=("power cap", "thermal (hardware)"),
                              compute_processes=3), [100, 101, 102])
    seen = []
    found = machine.gpu_state(_smi(None, None), nvml.read, kbench=lambda pids: seen.append(pids) or 1)
    assert seen == [[100, 101, 102]]  # nvidia-smi is not asked; the pids are classified, not kept
    assert found == GpuState(sm_mhz=1410, max_sm_mhz=1980, throttled=("power cap", "thermal (hardware)"),
                             compute_processes=3, kbench_elsewhere=1)
    nvml._lib = _FakeNvml(processes=0, fail="nvmlDeviceGetMaxClockInfo")
    assert nvml.read(0) is None  # a failed query: nvidia-smi is asked instead
    smi = machine.gpu_state(_smi("1980, 1980, 0x0\n", "1\n"), nvml.read)
    assert smi.compute_processes == 1 and smi.sm_mhz == 1980


def test_other_processes_on_the_gpu_and_a_throttled_gpu_are_reported():
    state = machine.gpu_state(_smi("1410, 1980, 0x0000000000000084\n", "1\n2\n3\n"), _no_nvml)
    assert state.throttled == ("power cap", "thermal (hardware)")
    busy, throttled = machine.gpu_warnings(state, own_processes=2)
    assert busy.text.startswith("[gpu_busy] 1 other process(es) held a context on this GPU")
    assert throttled.text == ("[gpu_throttled] the GPU was slowed while this was timed (power cap, thermal (hardware); "
                         "SM clock 1410 of 1980 MHz)")


def test_kbench_own_processes_outside_the_judge_are_its_parents_other_children_and_theirs():
    """The slot's next worker (a sibling of the judge, with its candidate below it) is kbench's own on the GPU; the
    judge's own tree (a solution's processes stay there) and processes elsewhere are not. This test process stands
    for the zygote: a judge and a sibling below it, each with a child."""
    judge = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    sibling = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            table = procfs.processes()
            below = {p.ppid: p.pid for p in table if p.ppid in (judge.pid, sibling.pid)}
            if len(below) == 2:
                break
            time.sleep(0.02)
        pids = [judge.pid, below[judge.pid], sibling.pid, below[sibling.pid], 1, os.getpid()]
        assert machine.kbench_elsewhere(pids, judge=judge.pid) == 2  # the sibling and its child
        assert machine.kbench_elsewhere(pids, judge=1) == 0  # a judge whose parent is nobody's: nothing is kbench's
    finally:
        for proc in (judge, sibling):
            proc.kill()
            proc.wait()


def test_kbench_own_contexts_elsewhere_are_not_another_programs():
    state = GpuState(compute_processes=5, kbench_elsewhere=2)
    assert machine.gpu_warnings(state, own_processes=3) == []  # the judge, its candidate, a witness; the next worker
    busy = machine.gpu_warnings(dataclasses.replace(state, kbench_elsewhere=1), own_processes=3)
    assert busy[0].text.startswith("[gpu_busy] 1 other process(es)")


def test_the_timing_cores_clock_comes_from_cpufreq_then_cpuinfo_and_only_for_one_core(tmp_path):
    """MachineState.core_mhz: the clock of the one core a pinned timing ran on (on four busy GPUs every host-bound
    phase took 1.4-1.6x longer, 2026-11-28: a package clocked down is one cause the next run can tell)."""
    root = tmp_path / "cpu"
    (root / "cpu3" / "cpufreq").mkdir(parents=True)
    (root / "cpu3" / "cpufreq" / "scaling_cur_freq").write_text("2450000\n")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 3700.125\n\nprocessor\t: 1\ncpu MHz\t\t: 1999.5\n\n")
    assert machine.core_mhz(lambda: {3}, root, cpuinfo) == 2450.0  # cpufreq's kHz
    assert machine.core_mhz(lambda: {1}, root, cpuinfo) == 1999.5  # no cpufreq for core 1: /proc/cpuinfo's
    assert machine.core_mhz(lambda: {7}, root, cpuinfo) is None  # neither knows core 7
    assert machine.core_mhz(lambda: {1, 3}, root, cpuinfo) is None  # not pinned: no one core to read
    (root / "cpu3" / "cpufreq" / "scaling_cur_freq").write_text("garbage")
    assert machine.core_mhz(lambda: {3}, root, tmp_path / "missing") is None
