"""Memory draws (kbench.judge.timing.placement): each side of a big call is timed on the fastest memory it drew.

On one H200 the same cuDNN kernel ran in 4.9 or 6.4 ms depending only on which memory the caching allocator had given
its intermediate; a speedup over one draw per side carried whichever draws the two sides got. Here, without a GPU:
which samples a side keeps, that sampling stops on the kept ones, and real judge and candidate processes drawing
every few rounds, with a reference whose speed moves in runs of calls.
"""

from __future__ import annotations

import dataclasses

import pytest

from kbench.config.run_config import TimingPolicy
from kbench.judge import judge
from kbench.judge.candidate import protocol
from kbench.judge.timing import placement
from kbench.judge.timing.placement import GROUP_ROUNDS, GROUPS, SLOW_GROUP, fastest_groups
from kbench.judge.timing.sampling import Sampled, measure_rounds
from kbench.results.findings import FindingCode
from kbench.results.records import Measurement, Status
from kbench.wire.jobs import EvaluateJob, ProblemRef, SolutionRef
from tests.conftest import FIXTURES

FAST, SLOW = 4.9e-3, 6.4e-3


def _groups(*speeds: float, rounds: int = GROUP_ROUNDS) -> list[float]:
    """Samples of one side: `rounds` per draw, each draw at its speed (with a little noise of its own)."""
    return [speed * (1 + 0.001 * (i % 3)) for speed in speeds for i in range(rounds)]


def test_a_side_keeps_only_the_draws_near_its_fastest():
    samples = _groups(SLOW, FAST, SLOW, SLOW, FAST, SLOW, FAST, SLOW)
    kept = fastest_groups(samples)
    assert [samples[i] for i in kept] == _groups(FAST, FAST, FAST)
    assert kept == (2, 3, 8, 9, 12, 13)


def test_a_call_whose_speed_does_not_move_keeps_every_sample():
    samples = [5e-3 * (1 + 0.004 * ((i * 7) % 5)) for i in range(16)]  # within 1.6% of each other
    assert fastest_groups(samples) == tuple(range(16))


def test_small_steps_between_draws_chain_and_the_first_large_step_ends_the_fastest():
    step_in, step_out = 1 + SLOW_GROUP * 0.9, 1 + SLOW_GROUP * 1.1
    chained = [FAST, FAST, FAST * step_in, FAST * step_in, FAST * step_in ** 2, FAST * step_in ** 2]
    assert fastest_groups(chained) == tuple(range(6))  # a noisy call's medians: no step large enough
    apart = [FAST, FAST, FAST * step_in, FAST * step_in, FAST * step_in * step_out, FAST * step_in * step_out]
    assert fastest_groups(apart) == (0, 1, 2, 3)


def test_a_noisy_call_keeps_its_draws_however_wide_its_spread():
    noisy = [1e-5 * (1 + 0.02 * ((i * 7) % 40)) for i in range(40)]  # 10-18 us, no two speeds
    assert len(fastest_groups(noisy)) >= 36


def test_an_unfinished_last_draw_is_judged_against_the_complete_ones_but_never_sets_the_pace():
    # the lone last sample is faster than every complete group: it stays, and the complete groups are not measured
    # against it (one sample is not a draw's speed)
    samples = [FAST, FAST, SLOW, SLOW, FAST * 0.5]
    assert fastest_groups(samples) == (0, 1, 4)
    assert fastest_groups([SLOW]) == (0,)  # no complete group: all of them


def test_a_check_draws_until_each_side_kept_enough_on_whole_draws():
    fast_enough = _groups(*[FAST] * (placement.KEPT_LEAST // GROUP_ROUNDS))
    half_slow = _groups(*[FAST, SLOW] * (placement.KEPT_LEAST // GROUP_ROUNDS))
    assert placement.kept_enough(fast_enough, fast_enough)
    assert not placement.kept_enough(fast_enough + [FAST], fast_enough + [FAST])  # a draw not finished
    assert not placement.kept_enough(half_slow[:placement.KEPT_LEAST], fast_enough)  # half its draws left out
    assert placement.kept_enough(half_slow, fast_enough)


def test_kept_only_takes_every_per_call_series_alike():
    m = Measurement((1.0, 2.0, 3.0), (1.1, 2.1, 3.1), "converged", (1.2, 2.2, 3.2), (0.1, 0.2, 0.3), "gpu")
    kept = placement.kept_only(m, (0, 2))
    assert kept == Measurement((1.0, 3.0), (1.1, 3.1), "converged", (1.2, 3.2), (0.1, 0.3), "gpu")


def test_the_figures_say_what_each_side_kept_and_left_out():
    solution = _groups(SLOW, FAST, FAST, SLOW)
    eager = _groups(FAST, FAST, FAST, FAST)
    found = placement.figures(solution, eager, fastest_groups(solution), fastest_groups(eager), draws=4)
    assert (found.draws, found.groups, found.solution_groups_kept, found.eager_groups_kept) == (4, 4, 2, 4)
    assert found.solution_spread == pytest.approx(SLOW / FAST, rel=0.01) and found.eager_spread < 1.01
    assert len(found.solution_dropped) == 2 * GROUP_ROUNDS and min(found.solution_dropped) >= SLOW
    assert found.eager_dropped == ()
    assert found.solution_dropped_groups == (0, 3) and found.eager_dropped_groups == ()  # by their place in the rounds


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sampling_stops_on_the_kept_samples_and_returns_every_sample():
    """Half the draws are 30% slower: over all samples the median's interval never narrows to 1%, so sampling
    would run to its cap; over the kept ones it converges once the run's least rounds are in."""
    clock = _Clock()
    speeds = [FAST, SLOW] * 100

    def sampler():
        index = len(taken)
        taken.append(index)
        value = speeds[(index // GROUP_ROUNDS) % len(speeds)]
        clock.now += value
        return Sampled(value, value)

    taken: list[int] = []
    policy = TimingPolicy(warmup_calls=0, warmup_s=0.0, min_samples=GROUPS * GROUP_ROUNDS, min_time_s=0.0,
                          max_time_s=5.0, rel_ci=0.01)
    found = measure_rounds({"a": sampler}, policy, clock, kept=fastest_groups)["a"]
    assert found.stop_reason == "converged" and len(found.samples) == GROUPS * GROUP_ROUNDS
    assert sorted(set(found.samples)) == [FAST, SLOW]  # every sample comes back; the caller keeps the fast ones

    clock.now, taken = 0.0, []
    unfiltered = measure_rounds({"a": sampler}, policy, clock)["a"]
    assert unfiltered.stop_reason == "max_time"


def test_a_row_draws_probe_groups_and_goes_on_to_groups_only_where_a_side_moved():
    from kbench.judge.timing.rounds import SolutionRounds

    class Rounds:  # only what `more` reads
        placed = drawing = True

    rounds = Rounds()
    assert SolutionRounds.more(rounds, GROUPS * GROUP_ROUNDS - 1)  # type: ignore[arg-type]
    assert not SolutionRounds.more(rounds, GROUPS * GROUP_ROUNDS)  # type: ignore[arg-type]
    rounds.drawing = False  # the first draws showed no side moving
    assert SolutionRounds.more(rounds, placement.PROBE_GROUPS * GROUP_ROUNDS - 1)  # type: ignore[arg-type]
    assert not SolutionRounds.more(rounds, placement.PROBE_GROUPS * GROUP_ROUNDS)  # type: ignore[arg-type]
    rounds.placed = False
    assert not SolutionRounds.more(rounds, 0)  # type: ignore[arg-type]
    assert placement.moved(_groups(FAST, SLOW), _groups(FAST, FAST))
    assert not placement.moved(_groups(FAST, FAST * 1.01), _groups(SLOW, SLOW))


# ---- real processes, on the CPU ------------------------------------------------------------------------------------

RUNS = FIXTURES / "process_speed" / "runs.py"
ONE_OP_PROBLEM = FIXTURES / "process_speed" / "live.py"  # one multiplication, 2 ms a call
ONE_OP_HONEST = FIXTURES / "solutions" / "one_op" / "honest.py"
RUNS_HONEST = FIXTURES / "process_speed_solutions" / "runs_honest.py"


def _quiet(event, **fields):
    pass


@pytest.fixture
def draws_on_the_cpu(monkeypatch):
    """Rows draw their memory on the CPU too (on CUDA a call allocating AFTER_MIN_BYTES does), so real processes show
    the draws' plumbing: the judge's own draw does nothing there, the candidate's makes its untimed call."""
    monkeypatch.setattr(judge, "AFTER_CHECKED", ("cpu",))
    sent: list[object] = []
    real = judge.Session.place

    def place(self, pages):
        sent.append(protocol.Place(pages))
        return real(self, pages)

    monkeypatch.setattr(judge.Session, "place", place)
    return sent


def _job(solution, problem=RUNS) -> EvaluateJob:
    return EvaluateJob(problem=ProblemRef("p", str(problem), {}), device="cpu", seed=1, trials=1, atol=1e-4,
                       rtol=1e-4, solution=SolutionRef("s", str(solution)))


def test_an_honest_copy_of_a_call_whose_speed_moves_in_runs_reads_one_on_its_fastest_draws(draws_on_the_cpu):
    """The reference runs 2 ms a call, or 5 ms in every other run of five calls of its process: each side's speed
    moves in runs, as a big call's did with its memory on the H200. Both sides draw every GROUP_ROUNDS rounds and keep
    their fastest draws: the honest copy reads 1.00x on 2 ms calls, with what was left out in the figures."""
    result = judge.judge_solution(_job(RUNS_HONEST), {}, _quiet)
    drawn = result.diagnostics.protocol.placements
    assert drawn is not None and drawn.draws >= GROUPS and drawn.groups >= GROUPS, result.diagnostics.protocol
    assert len(draws_on_the_cpu) >= 2 * GROUPS  # the solution's rounds and the check after them, each draw a Place
    # the fixture's runs of slow calls change speed inside a draw too (memory does so only between draws): a draw
    # with one fast call is kept whole (placement.draw_speed), so a few slow calls stay beside many fast ones
    for kept in (result.timing.samples, result.eager_timing.samples):
        assert sorted(kept)[len(kept) // 2] < 2.5e-3 and sum(t > 3.5e-3 for t in kept) <= len(kept) // 4, kept
    assert drawn.solution_dropped and drawn.eager_dropped and max(drawn.solution_dropped) > 4e-3
    assert drawn.solution_groups_kept < drawn.groups and drawn.solution_spread > 1.5
    assert len(drawn.solution_dropped_groups) == drawn.groups - drawn.solution_groups_kept
    spent = result.diagnostics.protocol.spent  # where the timing's seconds went, beyond the samples' own
    assert spent is not None and min(spent.draws_s, spent.warmup_s, spent.eager_s, spent.switch_s) > 0, spent
    assert sum(result.timing.judge_samples) <= spent.solution_s  # the judge's windows lie inside its calls' time
    assert spent.switch_s < spent.solution_s + spent.warmup_s + spent.decide_s
    assert spent.arm_s + spent.window_s < spent.solution_s  # parts of the solution's calls in the rounds
    parts = spent.decide_s + spent.warmup_s + spent.draws_s + spent.settle_s + spent.eager_s + spent.solution_s
    assert parts <= result.phases["timing"], (spent, result.phases)
    assert result.speedup_vs_eager == pytest.approx(1.0, abs=0.1), (result.status, result.warnings)
    processes = result.diagnostics.processes
    assert processes.after is not None and abs(processes.after - 1) < 0.1 and not processes.after_disagrees
    assert FindingCode.PROCESSES_DISAGREE not in [w.code for w in result.warnings], result.warnings


def test_a_row_whose_speed_does_not_move_stops_drawing_after_the_first_draws(draws_on_the_cpu, monkeypatch):
    """Where the first PROBE_GROUPS draws show neither side moving (placement.moved, asked once, here answered as a
    steady call's would be: a live CPU call's noise may show a step), the rounds draw no more and the check after
    them does not draw."""
    asked: list[tuple[int, int]] = []

    def steady(mine, theirs, rounds=GROUP_ROUNDS):
        asked.append((len(mine), len(theirs)))
        return False

    monkeypatch.setattr(placement, "moved", steady)
    result = judge.judge_solution(_job(FIXTURES / "solutions" / "one_op" / "honest.py",
                                       FIXTURES / "process_speed" / "live.py"), {}, _quiet)
    drawn = result.diagnostics.protocol.placements
    assert asked == [(placement.PROBE_GROUPS * GROUP_ROUNDS,) * 2]  # after the first draws' rounds, once
    assert drawn is not None and drawn.draws == placement.PROBE_GROUPS, drawn
    assert len(draws_on_the_cpu) == placement.PROBE_GROUPS  # none in the check after the rounds
    assert result.diagnostics.processes.after is not None


def test_a_row_that_does_not_draw_sends_no_place_and_records_no_figures(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(judge.Session, "place", lambda self, pages: sent.append(pages))
    result = judge.judge_solution(_job(RUNS_HONEST), {}, _quiet)
    assert sent == [] and result.diagnostics.protocol.placements is None


# ---- the judge's own eager, in the rounds and after them ------------------------------------------------------------


def test_the_judges_eager_slow_on_all_its_draws_in_the_rounds_is_caught_after_them():
    from kbench.judge.timing import checks
    from kbench.judge.timing.checks import Calibration

    fast_after = Calibration(eager=tuple(_groups(FAST, FAST, FAST, FAST)))
    slow_rounds = Measurement(tuple(_groups(SLOW, SLOW, SLOW, SLOW)))
    steady_rounds = Measurement(tuple(_groups(FAST, FAST, FAST, FAST)))
    assert checks.draws_disagree(slow_rounds, fast_after) == pytest.approx(SLOW / FAST, rel=0.01)
    assert checks.draws_disagree(steady_rounds, fast_after) is None
    assert checks.draws_disagree(Measurement((SLOW,) * 3), fast_after) is None  # too few to tell


def test_the_check_after_the_rounds_sends_a_row_whose_eager_missed_its_fast_memory_round_again(monkeypatch):
    """`judge._after` with the rounds' eager (a side moved): an eager slow in all its draws there, against the same
    eager fast in the check's draws, is `[processes_disagree]`, which has the solution timed again in a fresh
    process (the retry loop of judge._steps)."""
    from kbench.judge.timing.checks import Calibration

    monkeypatch.setattr(judge, "PROCESS_CHECKED", ("cpu",))
    same = tuple(_groups(FAST, FAST, FAST, FAST))
    monkeypatch.setattr(judge, "after", lambda *args: Calibration(eager=same, reference=same))

    class Bound:
        def bind(self, name, values, outputs=None):
            pass

    job = _job(RUNS_HONEST)
    slow = Measurement(tuple(_groups(SLOW, SLOW, SLOW, SLOW)))
    found = judge._after(job, Bound(), lambda x: x, lambda seed: [seed], slow)  # type: ignore[arg-type]
    assert found.disagrees and "the judge's eager on the fastest memory it drew ran" in found.finding.message
    assert not judge._after(job, Bound(), lambda x: x, lambda seed: [seed], None).disagrees  # type: ignore[arg-type]


def test_the_judges_gpu_bracket_asked_for_on_the_cpu_records_nothing_and_changes_nothing(monkeypatch):
    """KBENCH_JUDGE_BRACKET=1 (issue 40's measurement) brackets gated calls on the GPU only: a CPU row is judged as
    without it, with no bracket figures."""
    from kbench.judge.timing.timed_call import BRACKET_ENV

    monkeypatch.setenv(BRACKET_ENV, "1")
    result = judge.judge_solution(_job(FIXTURES / "solutions" / "one_op" / "honest.py",
                                       FIXTURES / "process_speed" / "live.py"), {}, _quiet)
    protocol = result.diagnostics.protocol
    assert result.status == Status.CORRECT, (result.status, result.message)
    assert protocol.bracket_excess_s == () and protocol.calibration_bracket_p50_s is None


def test_one_slow_sample_beside_a_fast_one_on_the_same_draw_is_the_machine_not_the_memory():
    """On four H200s most rows that drew on had one sample 7-20% slow beside a fast one of the same draw (another
    process making its CUDA context on the GPU): a draw's speed is its fastest sample, so such a draw is kept and the
    row draws no more; a draw slow in both its samples is still slow memory."""
    interfered = _groups(FAST, FAST, FAST, FAST)
    interfered[1] *= 1.15  # the second call of the first draw
    assert fastest_groups(interfered) == tuple(range(len(interfered)))
    assert not placement.moved(interfered, _groups(FAST, FAST, FAST, FAST))
    slow_draw = _groups(FAST, SLOW, FAST, FAST)
    assert fastest_groups(slow_draw) == (0, 1, 4, 5, 6, 7)
    assert placement.moved(slow_draw, _groups(FAST, FAST, FAST, FAST))


def test_a_side_at_the_other_sides_slow_speed_on_every_draw_is_stuck_there():
    """One H200, level 2's #77: the honest copy ran 46 of 46 draws at 6.43 ms while the judge's eager drew 4.94 ms
    seven times and 6.45 ms the rest; it read 0.77x. A side whose speed never moved while the other's did, sitting at
    the other's slow speed, is stuck there."""
    assert placement.stuck(_groups(*[6.43e-3] * 46), _groups(*[4.94e-3] * 7 + [6.45e-3] * 39)) == "solution"
    assert placement.stuck(_groups(SLOW, SLOW, SLOW, SLOW), _groups(FAST, SLOW, SLOW, FAST)) == "solution"
    assert placement.stuck(_groups(FAST, SLOW, FAST, SLOW), _groups(SLOW, SLOW, SLOW, SLOW)) == "eager"
    # at the other's fast speed (the honest copy that drew well), both steady, or a slower call of its own: not stuck
    assert placement.stuck(_groups(FAST, FAST, FAST, FAST), _groups(FAST, SLOW, SLOW, FAST)) == ""
    assert placement.stuck(_groups(SLOW, SLOW, SLOW, SLOW), _groups(FAST, FAST, FAST, FAST)) == ""
    assert placement.stuck(_groups(*[1.6 * FAST] * 4), _groups(FAST, SLOW, SLOW, FAST)) == ""
    assert placement.stuck([SLOW], [FAST]) == ""  # no complete draw: nothing to say
    figures = placement.figures(_groups(SLOW, SLOW, SLOW, SLOW), _groups(FAST, SLOW, SLOW, FAST), range(8),
                                (0, 1, 6, 7), 4)
    assert figures.stuck == "solution"


@pytest.fixture
def stuck_rounds(monkeypatch):
    """The check after the rounds on the CPU (as on CUDA for a big call), and rounds whose figures say the solution
    ran at the eager's slow speed on every draw, in the first `stuck_rounds.left` candidate processes."""
    from kbench.judge.timing.judge_timing import time_rounds
    from kbench.results.diagnostics import PlacementFigures

    monkeypatch.setattr(judge, "AFTER_CHECKED", ("cpu",))
    monkeypatch.setattr(judge, "PROCESS_CHECKED", ("cpu",))

    class Stuck:
        left = 100

    def rounds(*args, **kwargs):
        timed = time_rounds(*args, **kwargs)
        if Stuck.left <= 0:
            return timed
        Stuck.left -= 1
        figures = PlacementFigures(rounds=2, draws=12, groups=12, solution_groups_kept=12, eager_groups_kept=3,
                                   eager_spread=1.3, stuck="solution")
        protocol = dataclasses.replace(timed.protocol, placements=figures)
        return dataclasses.replace(timed, protocol=protocol)

    monkeypatch.setattr(judge, "time_rounds", rounds)
    return Stuck


def test_a_solution_stuck_at_the_eagers_slow_memory_is_timed_again_then_suspect(stuck_rounds):
    result = judge.judge_solution(_job(ONE_OP_HONEST, ONE_OP_PROBLEM), {}, _quiet)
    processes = result.diagnostics.processes
    assert processes.after_retries == judge.AFTER_RETRIES and processes.after_disagrees, processes
    found = [w for w in result.warnings if w.code == FindingCode.PROCESSES_DISAGREE]
    assert found and "slow memory on every one of its 12 memory draws" in found[0].message, result.warnings
    assert result.status == Status.SUSPECT


def test_a_solution_stuck_only_in_its_first_process_gets_its_speedup_from_the_next(stuck_rounds):
    stuck_rounds.left = 1
    result = judge.judge_solution(_job(ONE_OP_HONEST, ONE_OP_PROBLEM), {}, _quiet)
    assert result.diagnostics.processes.after_retries == 1, result.diagnostics.processes
    assert result.status == Status.CORRECT, result.warnings


def test_rounds_stop_once_a_side_is_stuck_at_the_others_slow_memory():
    """After GROUPS whole draws with the solution at the eager's slow speed on every one, more draws in this process
    are futile (the row is timed again in a fresh one, or is suspect): sampling stops there, saying why, instead of
    drawing on to its cap (on one H200 such a row took 92 rounds and 5 s)."""
    from types import SimpleNamespace

    from kbench.judge.timing.rounds import SolutionRounds

    clock = _Clock()
    eager_speeds = [FAST, SLOW, SLOW, SLOW] * 50  # the eager draws its fast memory one draw in four
    times: dict[str, list[float]] = {"eager": [], "solution": []}
    state = SimpleNamespace(drawing=True, times=times)

    def side(name):
        def sample():
            value = SLOW if name == "solution" else eager_speeds[len(times["eager"]) // GROUP_ROUNDS]
            times[name].append(value)
            clock.now += value
            return Sampled(value, value)
        return sample

    policy = TimingPolicy(warmup_calls=0, warmup_s=0.0, min_samples=10, min_time_s=0.0, max_time_s=60.0,
                          rel_ci=0.0001)
    found = measure_rounds({"eager": side("eager"), "solution": side("solution")}, policy, clock, kept=fastest_groups,
                           more=lambda rounds: rounds < GROUPS * GROUP_ROUNDS,  # as SolutionRounds.more, drawing
                           stuck=lambda rounds: SolutionRounds.stuck(state, rounds))
    assert found["solution"].stop_reason == "stuck" and len(found["solution"].samples) == GROUPS * GROUP_ROUNDS
    state.drawing = False  # a row that does not draw (or stopped drawing) is never stuck
    assert not SolutionRounds.stuck(state, GROUPS * GROUP_ROUNDS)
    state.drawing, times["solution"][:] = True, [FAST] * len(times["solution"])
    assert not SolutionRounds.stuck(state, GROUPS * GROUP_ROUNDS)  # at the eager's fast speed: not stuck
