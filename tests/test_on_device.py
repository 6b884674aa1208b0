"""Models and inputs made with the run's device as the default device, seeded; a constructor or get_inputs() that
cannot run that way runs again, seeded again, on the CPU. The meta device stands in for a GPU here: what matters is
where the tensors go and that the values are the seeded ones."""


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


