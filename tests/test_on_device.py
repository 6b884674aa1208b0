"""Models and inputs made with the run's device as the default device, seeded; a constructor or get_inputs() that
cannot run that way runs again, seeded again, on the CPU. The meta device stands in for a GPU here: what matters is
where the tensors go and that the values are the seeded ones."""

import os

import torch
import torch.nn as nn

from kbench.judge.harness import construct, input_maker


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.made_on = torch.empty(1).device.type  # where a factory call without a device lands


class NeedsTheCpu(nn.Module):
    calls = 0

    def __init__(self):
        super().__init__()
        NeedsTheCpu.calls += 1
        self.weight = nn.Parameter(torch.rand(4))
        self.first = float(self.weight[0])  # reads a value: impossible without real storage


def test_a_constructor_runs_with_the_device_as_default_device():
    model = construct(Plain, 0, "meta")
    assert model.made_on == "meta" and model.linear.weight.device.type == "meta"


def test_a_constructor_that_cannot_runs_again_seeded_on_the_cpu_and_is_moved():
    NeedsTheCpu.calls = 0
    model = construct(NeedsTheCpu, 7, "meta")
    assert NeedsTheCpu.calls == 2 and model.weight.device.type == "meta"
    torch.manual_seed(7)
    assert model.first == float(torch.rand(4)[0])  # seeded again before the CPU attempt


def test_on_the_cpu_the_constructor_runs_once_seeded():
    NeedsTheCpu.calls = 0
    first, second = construct(NeedsTheCpu, 3, "cpu"), construct(NeedsTheCpu, 3, "cpu")
    assert NeedsTheCpu.calls == 2 and torch.equal(first.weight, second.weight)


class _Problem:
    """A KernelBench-format module's get_inputs(), as input_maker sees it."""

    def __init__(self, get_inputs):
        self.get_inputs = get_inputs


def test_inputs_are_drawn_on_the_device_when_get_inputs_allows():
    make = input_maker(_Problem(lambda: [torch.rand(3, 4), 5]), "meta")
    x, n = make(0)
    assert x.device.type == "meta" and n == 5


def test_inputs_that_must_be_drawn_on_the_cpu_are_drawn_there_seeded_and_moved():
    calls = []

    def get_inputs():  # reads a value while drawing: impossible on the meta device, as numpy is on a GPU
        calls.append(1)
        x = torch.rand(3)
        return [x * float(x[0])]

    make = input_maker(_Problem(get_inputs), "meta")
    first = make(11)[0]
    assert first.device.type == "meta" and len(calls) == 2  # tried on the device, then drawn on the CPU
    make(11)
    assert len(calls) == 3  # from then on straight on the CPU
    cpu = input_maker(_Problem(get_inputs), "cpu")
    torch.manual_seed(11)
    x = torch.rand(3)
    assert torch.equal(cpu(11)[0], x * float(x[0]))  # the seed is set again before the CPU draw


def test_a_gpu_slots_timed_calls_are_issued_from_one_core_of_its_own():
    from kbench.judge.harness import pin, timing_core

    cores = [0, 1, 2, 3]
    assert timing_core(cores, "") == 3 and timing_core(cores, "0") == 3  # one GPU: the last core
    assert timing_core(cores, "1") == 2 and timing_core(cores, "2,3") == 1  # each GPU its own
    assert timing_core(cores, "5") == 2 and timing_core(cores, "GPU-8f2c") == 3
    assert timing_core([], "") is None and pin(0, None) is False


def test_a_pin_reaches_every_thread_of_the_process_and_threads_started_after_it():
    """A candidate is pinned after CUDA started its threads: the pin must reach them, not only the main thread."""
    import subprocess
    import sys

    from kbench.judge.harness import pin

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

