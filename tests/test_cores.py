"""Which host cores time and which do the rest of a CUDA run (kbench.system.cores): each GPU slot's timed calls from
a core of its own, on no two siblings of one physical core, and the run's other processes kept off those cores."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.execution.executor import Executor
from kbench.execution.executors import local_executor
from kbench.system import cores
from kbench.system.cores import (
    MIN_UNTIMED,
    TIMING_CORE_ENV,
    UNTIMED_CORES_ENV,
    format_cpulist,
    parse_cpulist,
    pin,
    plan_cores,
    timing_core,
    timing_order,
)


def _pairs_of_neighbours(core: int) -> frozenset[int]:
    """A machine whose SMT siblings are neighbours (0-1, 2-3, ...)."""
    return frozenset({core - core % 2, core - core % 2 + 1})


def _halves(count: int):
    """A machine of `count` logical cores whose siblings are i and i + count/2 (0-15 then 16-31 on 32)."""
    half = count // 2
    return lambda core: frozenset({core % half, core % half + half})


def _alone(core: int) -> frozenset[int]:
    return frozenset({core})


def test_a_cpu_list_reads_and_writes_as_the_kernel_writes_it():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("5") == {5} and parse_cpulist("") == frozenset()
    assert format_cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    assert format_cpulist([7]) == "7" and parse_cpulist(format_cpulist(range(0, 64, 3))) == set(range(0, 64, 3))
    with pytest.raises(ValueError):
        parse_cpulist("a-b")


def test_siblings_come_from_sysfs_and_a_core_it_says_nothing_of_is_alone(tmp_path: Path):
    topology = tmp_path / "cpu3" / "topology"
    topology.mkdir(parents=True)
    (topology / "thread_siblings_list").write_text("3,19\n")
    assert cores.siblings(3, tmp_path) == {3, 19}
    assert cores.siblings(4, tmp_path) == {4}  # no such file


def test_a_gpu_slots_timed_calls_are_issued_from_one_core_of_its_own():
    four = [0, 1, 2, 3]
    assert timing_core(four, "", _alone) == 3 and timing_core(four, "0", _alone) == 3  # one GPU: the last core
    assert timing_core(four, "1", _alone) == 2 and timing_core(four, "2,3", _alone) == 1  # each GPU its own
    assert timing_core(four, "5", _alone) == 2 and timing_core(four, "GPU-8f2c", _alone) == 3
    assert timing_core([], "", _alone) is None and pin(0, None) is False


def test_no_two_gpu_slots_time_on_siblings_of_one_physical_core():
    # Where siblings are neighbours the last two cores are one physical core: the second GPU takes the next one
    assert timing_order(range(8), _pairs_of_neighbours) == [7, 5, 3, 1]
    assert [timing_core(list(range(8)), str(i), _pairs_of_neighbours) for i in range(4)] == [7, 5, 3, 1]
    # Where they are i and i + 16 the last cores are all distinct physical cores already
    assert timing_order(range(32), _halves(32))[:4] == [31, 30, 29, 28]


def test_the_plan_keeps_each_timing_core_and_its_sibling_free_of_the_rest():
    plan = plan_cores(["0", "1"], set(range(32)), siblings_of=_halves(32))
    assert plan.core("0") == 31 and plan.core("1") == 30
    assert plan.kept == {31, 15, 30, 14}
    assert plan.untimed == set(range(32)) - {31, 15, 30, 14}
    assert plan.env("1") == {TIMING_CORE_ENV: "30", UNTIMED_CORES_ENV: "0-13,16-29"}
    assert plan.describe() == ("timed calls issued from GPU 0: core 31, GPU 1: core 30; cores 14-15,30-31 kept free of "
                               "the run's other work, which runs on 0-13,16-29")
    one = plan_cores([None], set(range(16)), visible="", siblings_of=_pairs_of_neighbours)  # one GPU: slot None
    assert one.core(None) == 15 and one.kept == {14, 15} and one.untimed == set(range(14))
    third = plan_cores([None], set(range(16)), visible="3", siblings_of=_alone)  # CUDA_VISIBLE_DEVICES=3
    assert third.core(None) == 12


def test_a_small_machine_or_the_switch_keeps_no_core_free_but_still_pins():
    small = plan_cores(["0", "1"], {0, 1, 2, 3}, siblings_of=_alone)
    assert len({0, 1, 2, 3} - {3, 2}) < MIN_UNTIMED
    assert small.kept == frozenset() and small.untimed == {0, 1, 2, 3} and small.core("1") == 2
    assert small.env("0") == {TIMING_CORE_ENV: "3"}  # no untimed cores named: workers stay where they are
    assert small.describe() == ("timed calls issued from GPU 0: core 3, GPU 1: core 2; no core kept free of the run's "
                                "other work")
    shared = plan_cores(["0"], set(range(32)), siblings_of=_halves(32), share=True)
    assert shared.kept == frozenset() and shared.core("0") == 31
    assert cores.run_plan(["0"], {cores.SHARE_ENV: "1"}).kept == frozenset()


def test_a_slots_planned_core_is_what_its_processes_time_on(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(TIMING_CORE_ENV, "5")
    assert timing_core() == 5
    assert timing_core([0, 1, 2, 3], "0", _alone) == 3  # cores given: the plan is not read
    monkeypatch.delenv(TIMING_CORE_ENV)
    assert timing_core() == timing_core(sorted(os.sched_getaffinity(0)))


def test_a_slots_workers_are_started_with_its_plan():
    plan = plan_cores(["0", "1"], set(range(32)), siblings_of=_halves(32))
    executor = Executor("local", ("0", "1"), lambda job, timeout, env: None, pins=True, cores=plan)  # type: ignore[arg-type,return-value]
    env = executor.env({"PATH": "/bin"}, "1")
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env[TIMING_CORE_ENV] == "30"
    assert parse_cpulist(env[UNTIMED_CORES_ENV]) == plan.untimed
    assert local_executor("cpu", 0).cores is None  # the CPU's timings are not pinned to a core


def test_a_process_on_the_untimed_cores_stays_there_with_its_threads_and_children():
    """What a worker does at its start (`enter_untimed`): it and everything it starts later run only there."""
    allowed = sorted(os.sched_getaffinity(0))
    untimed = allowed[:1]
    script = ("import os, subprocess, sys, threading, time\n"
              "from kbench.system import cores\n"
              "assert cores.enter_untimed()\n"
              "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
              "tasks = [os.sched_getaffinity(int(t)) for t in os.listdir('/proc/self/task')]\n"
              "child = subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'],\n"
              "                       capture_output=True, text=True).stdout.strip()\n"
              "print(sorted(set().union(*tasks)), len(tasks), child)\n")
    env = {**os.environ, UNTIMED_CORES_ENV: format_cpulist(untimed), "PYTHONPATH": str(Path.cwd())}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(untimed).replace(" ", ""), "2", str(untimed).replace(" ", "")], out.stdout
    assert cores.enter_untimed({}) is False and cores.enter_untimed({UNTIMED_CORES_ENV: "x"}) is False


def test_the_parent_goes_back_where_it_was_after_the_run():
    before = os.sched_getaffinity(0)
    allowed = sorted(before)
    plan = cores.CorePlan(timing=((None, allowed[-1]),), untimed=frozenset(allowed[:1]),
                          kept=frozenset(allowed[1:]) or frozenset(allowed))
    with cores.untimed_here(plan):
        assert os.sched_getaffinity(0) == set(allowed[:1])
    assert os.sched_getaffinity(0) == before
    with cores.untimed_here(None):
        assert os.sched_getaffinity(0) == before


def test_a_pin_reaches_every_thread_of_the_process_and_threads_started_after_it():
    """A candidate is pinned after CUDA started its threads: the pin must reach them, not only the main thread."""
    core = sorted(os.sched_getaffinity(0))[-1]
    script = ("import threading, time, sys\n"
              "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
              "print('up', flush=True); sys.stdin.readline()\n"
              "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
              "print('again', flush=True); sys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "up"

        def placements() -> list[set[int]]:
            tasks = os.listdir(f"/proc/{child.pid}/task")
            return [os.sched_getaffinity(int(t)) for t in tasks]

        assert len(placements()) >= 2
        assert pin(child.pid, core) is True
        assert all(p == {core} for p in placements()), placements()
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "again"
        assert len(placements()) >= 3 and all(p == {core} for p in placements()), placements()
    finally:
        child.kill()
        child.wait()


def _allowed_list(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def test_a_worker_forked_for_a_slot_places_itself_on_its_untimed_cores():
    """The plan travels with a fork's placement (kbench.execution.zygote.PLACEMENT_ENV): one zygote serves every slot,
    and each worker it forks goes where its own slot's plan says before it does anything else; a worker forked with
    no plan stays where the zygote is."""
    import time

    from kbench.execution import child, isolation, zygote

    allowed = sorted(os.sched_getaffinity(0))
    env = isolation.worker_path_env()
    owner = zygote.Zygote(child.zygote_env_of(env))
    planned = child.JobChild({**env, UNTIMED_CORES_ENV: str(allowed[0]), TIMING_CORE_ENV: str(allowed[-1])},
                             zygote=owner)
    plain = child.JobChild(env, zygote=owner)
    try:
        deadline = time.monotonic() + 20
        while _allowed_list(planned.proc.pid) != str(allowed[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _allowed_list(planned.proc.pid) == str(allowed[0])
        assert parse_cpulist(_allowed_list(plain.proc.pid)) == set(allowed)
    finally:
        planned.discard()
        plain.discard()
        owner.close()
