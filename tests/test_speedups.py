"""A speedup with its interval and divisor (kbench.results.speedups): noise is never counted as a win."""

import random

from kbench.results.records import EAGER, Evaluation, Measurement, Status
from kbench.results.speedups import of_row, significant_fast_p, speedup


def _samples(rng, centre, spread, n=40):
    return tuple(centre * (1 + rng.gauss(0, spread)) for _ in range(n))


def _row(problem, solution, eager, timing, status=Status.CORRECT):
    return Evaluation(problem=problem, solution=solution, status=status, device="cuda", size="full",
                      timing=Measurement(timing), eager_timing=Measurement(eager))


def test_a_real_speedup_is_significant_and_says_what_it_divided():
    rng = random.Random(1)
    s = speedup(Measurement(_samples(rng, 2.884e-3, 0.003)), Measurement(_samples(rng, 0.361e-3, 0.003)))
    assert s.significant and s.win and s.low < s.value < s.high
    assert s.label() == f"{s.value:.2f}x" and s.divided().endswith(" ms") and "2.88" in s.divided()
    assert s.beats(7.0) and not s.beats(9.0)


def test_an_honest_copy_within_noise_reads_about_one_and_is_no_win():
    rng = random.Random(2)
    s = speedup(Measurement(_samples(rng, 1e-3, 0.01)), Measurement(_samples(rng, 0.997e-3, 0.01)))
    assert not s.significant and s.low < 1 < s.high
    assert s.label().startswith("≈1x (")


def test_a_slowdown_within_the_noise_band_is_not_called_about_one():
    """An interval of 0.96-0.98 read '≈1x (0.96-0.98)' while a slower row read 0.96x (issue: suite reports)."""
    from kbench.results.speedups import Speedup

    slower = Speedup(0.97e-3, 1e-3, 0.96, 0.98)
    assert not slower.significant and not slower.win
    assert slower.label() == "~0.97x (0.96-0.98)"
    assert Speedup(1e-3, 1e-3, 0.98, 1.02).label() == "≈1x (0.98-1.02)"


def test_a_significant_slowdown_says_so_in_words_and_a_narrow_interval_keeps_its_digits():
    """Issue 41 item 1: in plain text a 0.77x row read like a win; an interval narrower than two decimals read
    '~1.00x (1.00-1.00)'."""
    from kbench.results.speedups import Speedup

    assert Speedup(4.92e-3, 6.41e-3, 0.75, 0.78).label() == "0.77x slower"
    assert Speedup(6.41e-3, 4.92e-3, 1.28, 1.32).label() == "1.30x"
    assert Speedup(0.998e-3, 1e-3, 0.9972, 0.9987).label() == "~0.998x"


def test_too_few_samples_are_never_a_win():
    s = speedup(Measurement((2e-3, 2e-3)), Measurement((1e-3, 1e-3)))
    assert s is not None and not s.significant and not s.beats(1.0)
    assert speedup(None, Measurement((1e-3,) * 5)) is None


def test_fast_p_counts_significant_wins_only_and_honest_copies_are_not_wins():
    """Issue 31: twenty honest copies 1.000-1.017x read as fast_1 85% before; counted by significance, fast_1 is 0."""
    rng = random.Random(3)
    rows = [_row(f"p{i}", "honest", _samples(rng, 1e-3, 0.01), _samples(rng, 1e-3 / (1 + 0.001 * i), 0.01))
            for i in range(20)]
    rows += [_row(f"p{i}", EAGER, _samples(rng, 1e-3, 0.01), _samples(rng, 1e-3, 0.01)) for i in range(20)]
    problems = sorted({r.problem for r in rows})
    assert significant_fast_p(rows, problems, 0.0) == 1.0  # fast_0: every problem has a correct solution
    assert significant_fast_p(rows, problems, 1.0) == 0.0
    fast = rows + [_row("p0", "fast", _samples(rng, 1e-3, 0.005), _samples(rng, 0.5e-3, 0.005))]
    assert significant_fast_p(fast, problems, 1.0) == 1 / 20 and significant_fast_p(fast, problems, 1.5) == 1 / 20
    assert significant_fast_p(fast, problems, 2.0) == 0.0
    assert of_row(_row("p", "x", (1e-3,) * 5, (1e-3,) * 5, status=Status.INCORRECT)) is None


def test_the_speedup_over_torch_compile_goes_through_the_reference_processs_ratio():
    from kbench.results.speedups import over_compile

    rng = random.Random(4)
    row = speedup(Measurement(_samples(rng, 3e-3, 0.002)), Measurement(_samples(rng, 1e-3, 0.002)))  # 3x eager
    eager, compiled = Measurement(_samples(rng, 3e-3, 0.002)), Measurement(_samples(rng, 1.5e-3, 0.002))  # 2x eager
    s = over_compile(row, eager, compiled)
    assert abs(s.value - 1.5) < 0.02 and s.low < s.value < s.high and s.win
    assert over_compile(row, eager, None) is None
