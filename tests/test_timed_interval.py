"""Only the call lies inside the timed interval, in every process that times one: an instrumented timer records every
tensor operation dispatched between its markers (a one-operation problem, so anything else is kbench's own)."""

import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kbench.config.run_config import MathFlags, TimingPolicy
from kbench.execution import isolation
from kbench.judge import judge
from kbench.judge import reference as reference_child
from kbench.judge.candidate import candidate, protocol
from kbench.judge.checks import correctness
from kbench.judge.harness import build_reference, input_maker, load_problem
from kbench.judge.timing import judge_timing, sampling
from kbench.judge.timing import rounds as round_steps
from kbench.results.records import Regime
from kbench.wire.jobs import EvaluateJob, ProblemRef, ReferenceJob, SolutionRef
from tests.conftest import FIXTURES

PROBLEM = FIXTURES / "problems" / "one_op" / "model.py"
SOLUTION = FIXTURES / "solutions" / "one_op" / "honest.py"
THE_CALL = ["mul.Tensor"]  # what the problem's forward dispatches, and all that may be timed
POLICY = TimingPolicy(warmup_calls=2, warmup_s=0.0, min_samples=5, min_time_s=0.0, max_time_s=0.2)


class Recorder(TorchDispatchMode):
    def __init__(self, ops: list[str]) -> None:
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(f"{func.overloadpacket.__name__}.{func._overloadname}")
        return func(*args, **(kwargs or {}))


class CountingTimer:
    """A Timer whose markers record what is dispatched between them (and report a fixed time)."""

    def __init__(self) -> None:
        self.windows: list[list[str]] = []
        self.last_issue = 0.0
        self.last_forced = False
        self.regime = Regime.HOST

    def sample(self, fn):
        ops: list[str] = []
        with Recorder(ops):
            fn()
        self.windows.append(ops)
        return 1e-3, 1e-3

    def use(self, regime):
        pass

    def decide(self, fn, calls=3):
        for _ in range(calls):
            self.sample(fn)
        return self.regime


@pytest.fixture
def timers(monkeypatch):
    made: list[CountingTimer] = []

    def make(device):
        made.append(CountingTimer())
        return made[-1]

    for module in (reference_child, judge_timing, round_steps):
        monkeypatch.setattr(module, "make_timer", make)
    candidate_timer = CountingTimer()

    def window(call):  # the candidate's timed window (candidate.window), recorded the same way
        ops: list[str] = []
        with Recorder(ops):
            out = call()
        candidate_timer.windows.append(ops)
        return out, 1e-3

    monkeypatch.setattr(candidate, "window", window)
    made.append(candidate_timer)
    yield made
    torch.set_grad_enabled(True)


def _job(mode):
    common = {"device": "cpu", "seed": 5, "trials": 2, "atol": 1e-5, "rtol": 1e-5,
              "problem": ProblemRef("one_op", str(PROBLEM)), "timing": POLICY}
    if mode == "reference":
        return ReferenceJob(**common, compile_baseline=False)
    return EvaluateJob(**common, solution=SolutionRef("honest", str(SOLUTION)))


def _quiet(event, **fields):
    pass


def _windows(made):
    return [w for t in made for w in t.windows]


def test_the_instrument_sees_work_of_the_harness_inside_the_markers():
    """The check below can fail: a sampler that copied the inputs inside its window would show the copy."""
    timer = CountingTimer()
    x, w = torch.rand(4, 8), torch.rand(8)
    sampling.local_sampler(lambda: torch.mul(*correctness.clone_inputs([x]), w), timer)()
    assert timer.windows == [["clone.default", "mul.Tensor"]]


def test_the_reference_process_times_the_call_and_nothing_else(timers):
    result = reference_child.time_reference(_job("reference"), _quiet)
    assert result.status == "correct" and len(result.rows[0].timing.samples) >= POLICY.min_samples
    windows = _windows(timers)
    assert len(windows) >= POLICY.min_samples + POLICY.warmup_calls
    assert all(w == THE_CALL for w in windows), windows


def test_the_judge_times_the_eager_reference_and_nothing_else(timers):
    """The judge's eager samples, in calibration and beside the solution (the solution is timed in its own process)."""
    result = judge.judge_solution(_job("evaluate"), {}, _quiet)
    assert result.status == "correct", result.message
    windows = _windows(timers)
    rounds = result.diagnostics.protocol.rounds
    assert len(windows) >= rounds + judge_timing.CALIBRATION_ROUNDS[0]
    assert all(w == THE_CALL for w in windows), windows


def test_the_candidate_times_the_solutions_call_and_nothing_else(timers):
    """The candidate's Arm and Go commands, run here in-process: its timed window holds the solution's call alone;
    on the CPU the outputs are copied into the judge's buffers after the window."""
    torch.set_grad_enabled(False)
    problem = load_problem(_job("evaluate").problem)
    reference, init = build_reference(problem, 5, "cpu")
    inputs = input_maker(problem, "cpu")(1)
    out = torch.empty(16, 8)
    server = candidate.CommandServer()
    server.calibrate(protocol.Calibrate("cpu", dataclasses.asdict(MathFlags()), str(PROBLEM), {}, init,
                                        reference.state_dict(), inputs, [out]))
    server.load(protocol.Load(str(SOLUTION), {}))
    server.build(protocol.Build("main", init, reference.state_dict(), 5, "cpu"))
    server.bind(protocol.Bind("main", inputs, [out]))
    replies = [(server.arm(protocol.Arm(Regime.HOST)), server.go(protocol.Go()))[1] for _ in range(3)]
    assert all(r["status"] == "ok" and r["outputs"] == [{"copied": True}] for r in replies)
    assert torch.equal(out, reference(*inputs))  # the delivered output, copied outside the window
    assert timers[-1].windows == [THE_CALL] * 3


def test_primed_reference_rounds_time_the_second_call_alone(timers, monkeypatch):
    """A launch-bound reference is timed right after an untimed call of its own (as on a GPU): every window still
    holds the call alone, and each sample costs one call outside the windows."""
    monkeypatch.setattr(sampling, "needs_priming", lambda device, fn, timer: True)
    calls = []
    real = reference_child.job_reference

    def counted(*args):
        model, init, make = real(*args)
        model.register_forward_hook(lambda *a: calls.append(1))
        return model, init, make

    monkeypatch.setattr(reference_child, "job_reference", counted)
    result = reference_child.time_reference(_job("reference"), _quiet)
    assert result.status == "correct" and result.rows[0].diagnostics.primed is True
    windows = _windows(timers)
    assert windows and all(w == THE_CALL for w in windows), windows
    assert len(calls) >= 2 * len(windows)


def test_primed_judge_rounds_give_the_candidate_fresh_inputs_only_after_its_untimed_call(timers, monkeypatch):
    """Primed rounds: the candidate's untimed call sees the last round's inputs, the timed one this round's, which
    reach the shared buffers only at the release (after the candidate said it is ready); the judge's eager call is
    timed on its second copy of the same values after an untimed call of its own."""
    from kbench.judge.timing import timed_call

    monkeypatch.setattr(judge_timing.checks.Calibration, "reference_launch_bound", property(lambda self: True))
    monkeypatch.setattr(judge_timing.SolutionRounds, "__init__", _primed_anyway(judge_timing.SolutionRounds.__init__))
    log: list[tuple[str, object, object]] = []
    real_call, real_sample = judge.Session.call, timed_call.TimedCalls.sample

    def call(self):
        log.append(("call", self.inputs[0].clone(), None))
        return real_call(self)

    def sample(self, gated, values, expected, label="a timed call"):
        before = self.session.inputs[0].clone()  # what the shared buffer holds when the call is armed
        seen = real_sample(self, gated, values, expected, label)
        log.append(("sample", before, (values[0].clone(), self.session.inputs[0].clone())))
        return seen

    monkeypatch.setattr(judge.Session, "call", call)
    monkeypatch.setattr(timed_call.TimedCalls, "sample", sample)
    result = judge.judge_solution(_job("evaluate"), {}, _quiet)
    assert result.status == "correct", result.message
    assert result.diagnostics.protocol.primed is True
    windows = _windows(timers)
    assert all(w == THE_CALL for w in windows), windows
    timed = [i for i in range(len(log) - 1) if [e[0] for e in log[i:i + 2]] == ["call", "sample"]]
    rounds = result.diagnostics.protocol.rounds
    assert len(timed) >= rounds
    for i in timed[-rounds:]:
        untimed_saw = log[i][1]
        armed_saw, (fresh, timed_ran) = log[i + 1][1], log[i + 1][2]
        assert not torch.equal(untimed_saw, fresh), "the untimed call saw this round's inputs"
        assert not torch.equal(armed_saw, fresh)  # not in the shared buffers until the release
        assert torch.equal(timed_ran, fresh)


def _primed_anyway(init):
    """SolutionRounds primes only on CUDA; here it primes on the CPU too, to check the order of its steps."""
    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.primed = True
    return patched


# As kbench's workers do: inductor's config is imported before the process is pinned to its one timing core.
COMPILE_IN_A_PINNED_CHILD = """
import os
import torch
import torch._inductor.config as config
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
model = torch.compile(torch.nn.Linear(4, 4))
with torch.no_grad():
    model(torch.randn(2, 4))
pid = os.getpid()
children = set()
for task in os.listdir(f"/proc/{pid}/task"):
    with open(f"/proc/{pid}/task/{task}/children") as f:
        children |= set(f.read().split())
print(config.compile_threads, len(children))
"""


def _compile_in_a_pinned_child(env: dict) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", COMPILE_IN_A_PINNED_CHILD], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    threads, children = done.stdout.split()[-2:]
    return int(threads), int(children)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_torch_compile_in_a_pinned_child_starts_no_compile_workers_on_its_timing_core():
    """Every child's environment (isolation.worker_path_env) has inductor compile in its own process: its default, read
    before the pin, is a pool of one worker per core of the machine, all started on the one timing core."""
    env = isolation.worker_path_env()
    assert _compile_in_a_pinned_child(env) == (1, 0)
    if len(os.sched_getaffinity(0)) > 1 and "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        bare = {k: v for k, v in env.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
        threads, _ = _compile_in_a_pinned_child(bare)  # what the variable prevents: a pool as wide as the machine
        assert threads == len(os.sched_getaffinity(0))
