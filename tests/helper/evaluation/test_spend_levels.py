"""The levels a threshold baseline plays with no cap: the same ones in every run, then on past the priced helper."""

from types import SimpleNamespace

import numpy as np
import pytest

from helper.evaluation.spend import PRICED, play_free


class Curve:
    """A sweep's context where a level set to spend s spends ``rate * s`` an episode."""

    def __init__(self, budgets, priced_spend, rate, horizon=8):
        self.budgets, self.rate = budgets, rate
        self.env = SimpleNamespace(horizon=horizon)
        self.priced = {max(budgets): priced_spend}
        self.extra, self.played = {}, []

    def usage(self, method):
        assert method == PRICED
        return self.priced

    def evaluate(self, row, build, spends, cap):
        self.played.append(spends[0])
        return [[{"interventions": self.rate * spends[0]}]]


def method():
    # Eight decisions an episode, distinct scores: the level for spend s asks at s of them.
    return SimpleNamespace(name="prm_threshold", row="prm_threshold", train_score=np.linspace(0, 1, 800),
                           decisions=8.0, score_fn=lambda ctx: (lambda *a: 0.5), decide_after="state")


@pytest.mark.parametrize("priced, rate, levels", [
    (1.6, 1.0, [1, 2, 3]),        # the curve passes the priced spend inside the common levels
    (2.9, 0.9, [1, 2, 3, 4]),     # an under-spending baseline goes on until it passes it
    (0.5, 1.0, [1, 2, 3]),        # never fewer than the common levels, however little the helper spends
])
def test_every_run_plays_the_levels_past_the_largest_budget_then_past_its_priced_spend(priced, rate, levels):
    ctx = Curve([1, 2], priced, rate)
    play_free(ctx, method())
    assert ctx.played == levels
    assert set(ctx.extra["prm_threshold"]["free_levels"]) == {str(s) for s in levels}


def test_the_curve_stops_at_the_horizon_and_where_a_level_asks_at_every_decision():
    ctx = Curve([1, 2], priced_spend=9.0, rate=0.5, horizon=4)
    play_free(ctx, method())
    assert ctx.played == [1, 2, 3, 4]  # the horizon: no level past it
    ctx = Curve([6, 7], priced_spend=9.0, rate=0.5, horizon=20)
    play_free(ctx, method())
    assert ctx.played == [1, 2, 3, 4, 5, 6, 7, 8]  # spend 8 of 8 decisions asks at every one: the curve ends
