"""The sampling protocol with an injected clock: no GPU, no real time."""

import pytest

from kbench.config.run_config import TimingPolicy
from kbench.judge.timing import checks, sampling, timers
from kbench.judge.timing.checks import (
    TIMER_BOUND_ABS_CPU_S,
    TIMER_BOUND_ABS_S,
    TIMER_BOUND_REL,
    Calibration,
    escaped_work_warning,
    timer_mismatch_warning,
)
from kbench.judge.timing.sampling import Sampled, converged, measure_interleaved, measure_rounds, warm_up
from kbench.judge.timing.timers import HostTimer
from kbench.results.records import Measurement, Regime


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTimer:
    """Each callable 'takes' the next duration from its script; the clock advances by it."""

    def __init__(self, clock: FakeClock, scripts: dict[str, list[float]], host_extra: float = 0.0,
                 issue_share: float = 0.1) -> None:
        self.clock, self.scripts, self.host_extra, self.issue_share = clock, scripts, host_extra, issue_share
        self.calls: list[str] = []
        self.last_issue = 0.0
        self.regime = Regime.HOST

    def sample(self, fn):
        name = fn()
        self.calls.append(name)
        script = self.scripts[name]
        duration = script[(len([c for c in self.calls if c == name]) - 1) % len(script)]
        self.clock.now += duration + self.host_extra
        self.last_issue = self.issue_share * duration
        return duration, duration + self.host_extra


def fns(*names):
    return {n: (lambda n=n: n) for n in names}


def test_host_timer_reads_the_injected_clock():
    clock = FakeClock()

    def work():
        clock.now += 0.25

    assert HostTimer(clock).sample(work) == (0.25, 0.25)


def test_warm_up_needs_both_calls_and_time_and_goes_through_the_timer():
    clock = FakeClock()
    timer = FakeTimer(clock, {"a": [0.001]})
    n = warm_up(lambda: "a", timer, TimingPolicy(warmup_calls=3, warmup_s=0.025), clock)
    assert n == len(timer.calls) == 25  # 3 calls are not 25 ms; it takes 25 synchronized calls of 1 ms


def test_warm_up_samples_are_not_kept():
    clock = FakeClock()
    timer = FakeTimer(clock, {"a": [0.01]})
    policy = TimingPolicy(warmup_calls=5, warmup_s=0, min_samples=10, min_time_s=0, max_time_s=10)
    out = measure_interleaved(fns("a"), timer, policy, clock)
    assert len(timer.calls) == 5 + len(out["a"].samples) and len(out["a"].samples) == 10


def test_constant_samples_stop_at_the_minimum_count_and_time():
    clock = FakeClock()
    policy = TimingPolicy(warmup_calls=0, warmup_s=0, min_samples=10, min_time_s=0.1, max_time_s=10)
    timer = FakeTimer(clock, {"a": [0.02]})
    out = measure_interleaved(fns("a"), timer, policy, clock)
    # 10 samples are only 0.2 s in... the 0.1 s minimum is met by then, and the CI is zero-width.
    assert out["a"].stop_reason == "converged"
    assert len(out["a"].samples) == 10


def test_min_time_keeps_short_samples_going():
    clock = FakeClock()
    policy = TimingPolicy(warmup_calls=0, warmup_s=0, min_samples=10, min_time_s=0.1, max_time_s=10)
    out = measure_interleaved(fns("a"), FakeTimer(clock, {"a": [0.001]}), policy, clock)
    assert len(out["a"].samples) == 100  # 100 x 1 ms reaches 0.1 s


def test_noisy_samples_stop_at_max_time():
    clock = FakeClock()
    policy = TimingPolicy(warmup_calls=0, warmup_s=0, min_samples=10, min_time_s=0.1, max_time_s=1.0, rel_ci=0.01)
    spread = [0.01 + 0.02 * ((i * 0.6180339887) % 1) for i in range(1000)]  # distinct values, 10-30 ms
    out = measure_interleaved(fns("a"), FakeTimer(clock, {"a": spread}), policy, clock)
    assert out["a"].stop_reason == "max_time"
    assert 45 <= len(out["a"].samples) <= 55  # about 1.0 s of samples averaging 20 ms


def test_interleaving_alternates_order_and_waits_for_every_callable():
    clock = FakeClock()
    policy = TimingPolicy(warmup_calls=0, warmup_s=0, min_samples=2, min_time_s=0, max_time_s=100, rel_ci=0.01)
    timer = FakeTimer(clock, {"fast": [0.01], "noisy": [0.01, 0.05]})
    out = measure_interleaved(fns("fast", "noisy"), timer, policy, clock)
    assert timer.calls[:4] == ["fast", "noisy", "noisy", "fast"]
    assert len(out["fast"].samples) == len(out["noisy"].samples)
    assert out["fast"].stop_reason == "max_time"  # the noisy one never converges, so both go on


def test_converged_requires_a_tight_interval():
    policy = TimingPolicy(min_samples=10, min_time_s=0.0, rel_ci=0.01)
    assert converged([1.0] * 10, 1.0, policy)
    assert not converged([1.0] * 9, 1.0, policy)
    assert not converged([1.0, 1.1] * 10, 1.0, policy)


def test_host_time_far_above_event_time_is_flagged():
    honest = Measurement((1e-3,) * 10, (1.02e-3,) * 10)
    escaped = Measurement((1e-5,) * 10, (2e-3,) * 10)
    assert escaped_work_warning(honest) is None
    assert "outside the timed stream" in escaped_work_warning(escaped).text


def test_a_sample_count_cut_short_by_max_time_is_flagged():
    from kbench.judge.timing.checks import few_samples_warning

    policy = TimingPolicy(min_samples=10, max_time_s=2.0)
    assert "[few_samples] only 1 sample(s)" in few_samples_warning(Measurement((0.01,), (), "max_time"), policy).text
    assert few_samples_warning(Measurement((0.01,) * 12, (), "max_time"), policy) is None
    assert few_samples_warning(Measurement((0.01,) * 10, (), "converged"), policy) is None


def test_round_hooks_run_outside_every_sample_in_order():
    clock = FakeClock()
    events: list[str] = []

    def sampler(name):
        def sample():
            events.append(name)
            clock.now += 0.01
            return Sampled(0.01, 0.01)
        return sample

    policy = TimingPolicy(warmup_calls=1, warmup_s=0.0, min_samples=3, min_time_s=0.0, max_time_s=10.0)
    measure_rounds({"a": sampler("a"), "b": sampler("b")}, policy, clock,
                   before_round=lambda i: events.append(f"before {i}"), after_round=lambda i: events.append(f"after {i}"))
    assert events[:3] == ["before -1", "a", "b"]  # fresh inputs before the warm-up, then one warm-up call each
    assert events[3:] == ["before 0", "a", "b", "after 0", "before 1", "b", "a", "after 1", "before 2", "a", "b", "after 2"]


def test_a_remote_sampler_keeps_the_judges_clock_beside_the_reported_time():
    clock = FakeClock()

    def remote():
        clock.now += 0.003
        return Sampled(0.002, 0.0021, 0.003)

    policy = TimingPolicy(warmup_calls=1, warmup_s=0.0, min_samples=4, min_time_s=0.0, max_time_s=10.0)
    m = measure_rounds({"solution": remote}, policy, clock)["solution"]
    assert m.samples == (0.002,) * 4 and m.judge_samples == (0.003,) * 4 and m.host_samples == (0.0021,) * 4
    assert Measurement.from_json(m.to_json()) == m


def _measured(reported, judge):
    return Measurement(tuple(reported), tuple(reported), "converged", tuple(judge))


def test_a_round_trip_within_the_calibrated_cost_is_not_flagged():
    calibration = Calibration({Regime.HOST: (0.0004, 0.0005, 0.0005, 0.0006)})
    m = _measured([0.002] * 10, [0.0025] * 10)  # 0.5 ms over the report, what the protocol costs
    assert timer_mismatch_warning(m, calibration) is None


def test_a_reported_time_the_judges_clock_contradicts_is_flagged():
    calibration = Calibration({Regime.HOST: (0.0004, 0.0005, 0.0005, 0.0006)})
    m = _measured([0.001] * 10, [0.0025] * 10)  # reports 1 ms; the judge saw 2.5 ms round trips
    warning = timer_mismatch_warning(m, calibration)
    assert warning is not None and warning.code == "timer_mismatch" and "1.000 ms" in warning.message


def test_the_bound_is_a_share_of_the_reported_time_with_a_floor_per_device():
    calibration = Calibration({Regime.HOST: (0.0005,) * 10})
    assert calibration.bound(0.0) == TIMER_BOUND_ABS_S
    assert calibration.bound(0.010) == pytest.approx(TIMER_BOUND_REL * 0.010)
    assert calibration.bound(0.0, cpu=True) == TIMER_BOUND_ABS_CPU_S


def _jittered(rng, centre_s, spread_s, n):
    """Excess samples as the H100 showed them: a centre, a spread, a long right tail."""
    return [centre_s + rng.gauss(0.0, spread_s) + rng.expovariate(1 / spread_s) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_a_shave_of_a_tenth_stands_out_of_the_protocols_jitter_and_an_honest_row_does_not(seed):
    """A 0.36 ms call (the shortest shipped solution), excess jitter of 25 us around 0.5 ms: an honest row's excess
    is drawn like the calibration's and is never flagged; a row that reports 10% or 50% less is, every time."""
    import random

    rng = random.Random(seed)
    call = 0.36e-3
    calibration = Calibration({Regime.GPU: tuple(_jittered(rng, 0.5e-3, 25e-6, 58))})
    for shave, flagged in ((0.0, False), (0.10, True), (0.50, True)):
        excess = _jittered(rng, 0.5e-3, 25e-6, 150)
        reported = [call * (1 - shave) + rng.gauss(0.0, 2e-6) for _ in excess]
        windows = [call + e for e in excess]
        m = Measurement(tuple(reported), judge_samples=tuple(windows), regime="gpu")
        assert (timer_mismatch_warning(m, calibration) is not None) is flagged, (shave, seed)
    host_only = Calibration({Regime.HOST: (0.5e-3,) * 20})
    assert timer_mismatch_warning(m, host_only) is None  # no calibration of the row's regime: nothing to compare with


def test_the_cpu_bound_has_a_floor_of_its_own():
    calibration = Calibration({Regime.HOST: (0.0004,) * 10})
    jittery = _measured([0.0013] * 10, [0.0019] * 10)  # 0.2 ms more than the calibration: within the CPU's floor
    assert timer_mismatch_warning(jittery, calibration, cpu=True) is None
    assert timer_mismatch_warning(jittery, calibration) is not None  # a GPU row with that gap is flagged
    shaved = _measured([0.0027] * 10, [0.0034] * 10)  # a 3 ms call reported 10% low: 0.3 ms over the floor's 0.25
    assert timer_mismatch_warning(shaved, calibration, cpu=True) is not None


def test_escaped_work_is_measured_above_what_a_clean_call_shows():
    m = Measurement((0.0001,) * 10, (0.0003,) * 10)  # host 0.2 ms above the events
    assert escaped_work_warning(m) is not None
    assert escaped_work_warning(m, baseline_s=0.00019) is None  # a GPU context switch every call costs as much


def test_issue_times_are_kept_and_a_call_the_host_cannot_issue_faster_than_the_gpu_runs_is_launch_bound():
    policy = TimingPolicy(warmup_calls=1, warmup_s=0.0, min_samples=5, min_time_s=0.0, max_time_s=1.0)
    clock = FakeClock()
    busy = sampling.measure_interleaved(fns("a"), FakeTimer(clock, {"a": [1e-3]}, issue_share=0.1), policy, clock)["a"]
    assert busy.issue_samples == (1e-4,) * len(busy.samples)
    assert checks.launch_bound_warning(busy) is None
    bound = sampling.measure_interleaved(fns("a"), FakeTimer(clock, {"a": [1e-3]}, issue_share=0.9), policy, clock)["a"]
    warning = checks.launch_bound_warning(bound)
    assert warning.text.startswith("[launch_bound] the host spends 0.900 ms of the call's 1.000 ms issuing it "
                                   "(launches, Python, or a wait for the GPU inside the call")
    assert "GPU time" not in warning.text  # a host-regime time is not the GPU's (the issue's self-contradiction)
    assert Measurement.from_json(bound.to_json()).issue_samples == bound.issue_samples


def test_rounds_can_keep_one_order_so_each_sampler_always_follows_the_same_one():
    policy = TimingPolicy(warmup_calls=1, warmup_s=0.0, min_samples=4, min_time_s=0.0, max_time_s=1.0)
    clock = FakeClock()
    timer = FakeTimer(clock, {"a": [1e-3], "b": [1e-3]})
    sampling.measure_interleaved(fns("a", "b"), timer, policy, clock)
    assert timer.calls[2:6] == ["a", "b", "b", "a"]  # after the warm-ups: alternating
    timer = FakeTimer(clock, {"a": [1e-3], "b": [1e-3]})
    sampling.measure_rounds({n: sampling.local_sampler(f, timer) for n, f in fns("a", "b").items()}, policy, clock,
                            alternate=False)
    assert timer.calls[2:8] == ["a", "b"] * 3


def test_a_launch_bound_reference_is_not_called_disturbed():
    """Its time is the judge's host issuing launches, which varies between phases; GPU work left behind by the
    candidate would lengthen the GPU time and end the launch-bound state, so the check still applies then."""
    calibration = Calibration({Regime.HOST: (1e-5,) * 10}, eager=(1e-3,) * 10)
    slow = (1.5e-3,) * 20
    gpu_bound = Measurement(slow, slow, issue_samples=(0.2e-3,) * 20)
    assert checks.disturbed_warning(gpu_bound, calibration).code == "reference_disturbed"
    host_bound = Measurement(slow, slow, issue_samples=(1.4e-3,) * 20)
    assert checks.disturbed_warning(host_bound, calibration) is None


def test_settle_spins_through_its_pause_instead_of_sleeping(monkeypatch):
    """A core left idle may issue the next call's launches more slowly: the pause is spent on the host clock."""
    monkeypatch.setattr(sampling, "synchronize", lambda device: None)
    monkeypatch.setattr("time.sleep", lambda s: pytest.fail("settle slept"))
    reads: list[float] = []

    def clock() -> float:
        reads.append(len(reads) * 1e-4)
        return reads[-1]

    sampling.settle("cuda", clock)
    assert len(reads) >= sampling.SETTLE_S / 1e-4  # it kept reading the clock until the pause was over
    reads.clear()
    sampling.settle("cpu", clock)
    assert reads == []


def test_the_garbage_collector_is_paused_inside_a_timed_window_only():
    import gc

    seen: list[bool] = []
    HostTimer().sample(lambda: seen.append(gc.isenabled()))
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        HostTimer().sample(lambda: 1 / 0)
    assert gc.isenabled()  # restored when the call raises too


@pytest.mark.parametrize("issue, gpu, expected", [(0.3e-3, 1e-3, True), (0.95e-3, 1e-3, True),
                                                 (1.2e-3, 1e-3, False)])
def test_a_call_is_gpu_bound_when_the_host_issues_it_faster_than_the_gpu_runs_it(issue, gpu, expected):
    assert timers.gpu_bound([issue] * 3, [gpu] * 3) is expected
    assert timers.gpu_bound([], [gpu]) is False


def test_only_a_gpu_call_timed_in_the_host_regime_is_primed():
    class Decides:
        def __init__(self, regime):
            self.regime = regime

        def decide(self, fn):
            return self.regime

    assert sampling.needs_priming("cuda", lambda: None, Decides(Regime.HOST)) is True
    assert sampling.needs_priming("cuda", lambda: None, Decides(Regime.GPU)) is False
    assert sampling.needs_priming("cpu", lambda: None, HostTimer()) is False


def test_a_primed_sampler_times_the_second_of_two_calls():
    clock = FakeClock()
    timer = FakeTimer(clock, {"f": [2e-3, 3e-3]})
    calls: list[int] = []
    sample = sampling.local_sampler(lambda: calls.append(1) or "f", timer, primed=True)()
    assert calls == [1, 1] and timer.calls == ["f"] and sample.timed == 2e-3


def test_the_judges_calibration_says_whether_the_reference_is_launch_bound():
    assert Calibration(eager_regime="host").reference_launch_bound
    assert not Calibration(eager_regime="gpu").reference_launch_bound
    eager = (1e-3,) * 4  # a record without the regime: from the issue times, as before
    assert Calibration({Regime.HOST: (1e-4,) * 4}, eager=eager, eager_issue=(0.9e-3,) * 4).reference_launch_bound
    assert not Calibration({Regime.HOST: (1e-4,) * 4}).reference_launch_bound  # no samples: not primed


def test_a_measurements_regime_is_the_hosts_if_any_sample_was():
    assert sampling.regime_of(["gpu", "gpu"]) == "gpu"
    assert sampling.regime_of(["gpu", "host"]) == "host"  # a gate the watchdog opened switched the timer
    assert sampling.regime_of([]) == ""
    m = Measurement((1e-3,) * 3, regime="gpu")
    assert Measurement.from_json(m.to_json()).regime == "gpu"


def test_work_that_runs_past_the_candidates_signal_shows_in_the_verification_time():
    """A stream that says its call is over before it is: the judge's reads of the outputs wait for the rest (the GPU
    runs one process's work at a time), so verifying takes longer than calibrated."""
    import random

    rng = random.Random(3)
    calibration = Calibration(verify=tuple(_jittered(rng, 0.3e-3, 20e-6, 58)))
    honest = _jittered(rng, 0.3e-3, 20e-6, 60)
    assert checks.unfinished_warning(honest, 0.36e-3, calibration) is None
    early = [v + 0.1e-3 for v in _jittered(rng, 0.3e-3, 20e-6, 60)]  # 0.1 ms of work left at the signal
    warning = checks.unfinished_warning(early, 0.36e-3, calibration)
    assert warning is not None and warning.code == "unfinished_work"
    assert checks.unfinished_warning(early, 0.36e-3, Calibration()) is None  # nothing calibrated: nothing to say


def test_at_the_cap_rounds_go_on_to_min_samples_when_they_fit_in_twice_the_cap():
    """A 100 ms call beside the reference with a round's overheads (0.45 s a round) reaches the 3 s cap after 7
    rounds: it goes on to 10 (4.5 s, within twice the cap). One whose rounds take 0.8 s stops at the cap: 10 of them
    would take 8 s."""
    policy = TimingPolicy(warmup_calls=0, warmup_s=0, min_samples=10, min_time_s=0.1, max_time_s=3.0, rel_ci=0.001)
    spread = [0.1 + 0.01 * ((i * 0.6180339887) % 1) for i in range(100)]  # never converges at +-0.1%
    clock = FakeClock()
    out = measure_interleaved(fns("a", "b"), FakeTimer(clock, {"a": spread, "b": spread}, host_extra=0.125), policy,
                              clock)
    assert out["a"].stop_reason == "max_time" and len(out["a"].samples) == len(out["b"].samples) == 10
    assert 4.4 < clock.now < 4.7
    clock = FakeClock()
    out = measure_interleaved(fns("a", "b"), FakeTimer(clock, {"a": [0.3, 0.31], "b": [0.3, 0.31]}, host_extra=0.1),
                              policy, clock)
    assert out["a"].stop_reason == "max_time" and len(out["a"].samples) == 4  # 3.2 s: the first round past the cap
