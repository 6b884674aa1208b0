"""Which timed calls are compared in full after their round (kbench.judge.timing.rounds.Rechecks): a budget, not a size."""

import random

from kbench.judge.timing.rounds import RECHECK_BUDGET, RECHECK_FLOOR, Rechecks


def _rounds(rechecks, count, cost_s, round_s):
    checked = []
    for index in range(count):
        rechecks.round_s = round_s
        if rechecks.wanted(index):
            checked.append(index)
            rechecks.cost_s = cost_s
    return checked


def test_a_comparison_within_the_budget_follows_every_call():
    checks = Rechecks(random.Random(1), 10)
    assert _rounds(checks, 50, cost_s=0.002, round_s=0.010) == list(range(50)) and checks.every_call


def test_a_costly_comparison_is_kept_to_its_budget_on_average():
    """A 70 ms call on the CPU whose float64 recheck takes 3.2 s (issue 29): about RECHECK_FLOOR of the rounds, one
    of them among the first ten, rather than every round."""
    checks = Rechecks(random.Random(2), 10)
    checked = _rounds(checks, 400, cost_s=3.2, round_s=0.14)
    assert checked[0] == 0  # the first comparison, which measures what one costs
    assert checks.share == RECHECK_FLOOR and not checks.every_call
    assert 0.5 * RECHECK_FLOOR * 400 < len(checked) < 2 * RECHECK_FLOOR * 400
    assert len([i for i in checked if 1 <= i < 10]) <= 3


def test_a_moderately_costly_comparison_gets_the_share_the_budget_allows():
    checks = Rechecks(random.Random(3), 10)
    checks.cost_s, checks.round_s = 0.04, 0.02
    assert checks.share == RECHECK_BUDGET * 0.02 / 0.04
