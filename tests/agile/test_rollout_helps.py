"""The episode loop with several kinds of help: no episode spends past its budget or a kind past its cap,
every kind is drawn, weights are kept, each row names the help it called and its cost, and the one-strong-actor call
is the one-kind case of it. On the tiered rapids (``examples.tiered_rapids``): plain Python, known helps."""

from __future__ import annotations

from dataclasses import asdict
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agile.helps import Help, draw_kind
from agile.protocol import HUMAN
from agile.rollout import run_episodes
from examples import rapids
from examples.tiered_rapids import KINDS, HelpAgent, make_agent, make_episodes

NAMES = tuple(KINDS)


def own_helps(prices, caps=(None, None, None), weights=(1, 1, 1)) -> list[Help]:
    """The episodes' own three kinds (no agent: ``expert_action(kind=...)``)."""
    return [Help(n, None, p, c, w) for n, p, c, w in zip(NAMES, prices, caps, weights)]


prices = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 4.0])


@settings(max_examples=40, deadline=None)
@given(prices=st.tuples(prices, prices, prices), budget=st.sampled_from([0, 0.5, 1, 2.5, 3, 6, 10]),
       caps=st.tuples(*[st.one_of(st.none(), st.integers(0, 3))] * 3), p=st.floats(0.0, 1.0),
       seed=st.integers(0, 10_000), proposal=st.booleans())
def test_no_episode_spends_past_its_budget_or_a_kind_past_its_cap(prices, budget, caps, p, seed, proposal):
    helps = own_helps(prices, caps)
    records = run_episodes(make_episodes("train", 12, seed), make_agent(), helps=helps, budget=budget,
                           explore_p=p, rng_seed=seed, decide_after="proposal" if proposal else "state")
    price = {h.name: Fraction(str(h.price)) for h in helps}
    for rows in records:
        spent = Fraction(0)
        for row in rows:
            assert row.intervened == bool(row.help_kind)
            assert row.help_cost == (float(price[row.help_kind]) if row.help_kind else 0.0)
            assert row.budget_left == int(Fraction(str(budget)) - spent)  # the cost left, rounded down
            spent += price.get(row.help_kind, Fraction(0))
        assert spent <= Fraction(str(budget))
        for h in helps:
            if h.cap is not None:
                assert sum(row.help_kind == h.name for row in rows) <= h.cap


def test_every_kind_is_drawn_and_answered_by_its_own_help():
    records = run_episodes(make_episodes("train", 300, 1), make_agent(), helps=own_helps((1, 2, 4)), budget=24,
                           explore_p=1.0, rng_seed=1)
    rows = [row for episode in records for row in episode]
    assert {row.help_kind for row in rows} == set(NAMES)  # the agent never acts at p = 1 with budget for all
    for row in rows:  # the human's answer is the human's actor; the others a stronger model's
        assert row.actor == (HUMAN if row.help_kind == "human" else "strong")


def test_the_draw_keeps_the_weights_among_the_affordable_kinds():
    helps = own_helps((1, 1, 1), weights=(6, 3, 1))
    records = run_episodes(make_episodes("train", 2000, 2), make_agent(), helps=helps, budget=24, explore_p=1.0,
                           rng_seed=2)
    kinds = [row.help_kind for episode in records for row in episode]
    for h in helps:
        share, expected = kinds.count(h.name) / len(kinds), h.weight / 10
        assert abs(share - expected) < 5 * (expected * (1 - expected) / len(kinds)) ** 0.5
    assert draw_kind(helps, 0.0).name == "compute" and draw_kind(helps, 0.999999).name == "human"
    assert [draw_kind(helps[1:], u).name for u in (0.74, 0.76)] == ["stronger", "human"]  # among these only: 3 : 1


def test_one_kind_of_price_one_is_the_one_strong_actor_call():
    """``helps=[Help("human")]`` plays and logs what ``strong=None`` does; only the help columns are added."""
    def plain(**kwargs):
        return run_episodes(rapids.make_episodes("train", 60, 3), rapids.make_agent(), budget=2, explore_p=0.4,
                            rng_seed=3, **kwargs)

    one, kinds = plain(), plain(helps=[Help("human")])
    assert any(row.intervened for rows in one for row in rows)
    for a_rows, b_rows in zip(one, kinds):
        for a, b in zip(a_rows, b_rows, strict=True):
            assert b.help_kind == ("human" if b.intervened else "") and b.help_cost == float(b.intervened)
            assert asdict(a) | {"help_kind": b.help_kind, "help_cost": b.help_cost} == asdict(b)


def test_a_help_with_an_agent_and_the_episodes_own_kind_give_the_same_answers():
    def play(helps):
        return run_episodes(make_episodes("train", 80, 4), make_agent(), helps=helps, budget=8, explore_p=0.5,
                            rng_seed=4)

    agents = [Help(n, HelpAgent(n), p) for n, p in zip(NAMES, (1, 2, 4))]
    assert [[asdict(r) for r in rows] for rows in play(agents)] == \
        [[asdict(r) for r in rows] for rows in play(own_helps((1, 2, 4)))]


class KindGate:
    """Names the human at the last crossing, answers ``answer`` elsewhere."""

    def __init__(self, answer):
        self.answer = answer

    def should_intervene(self, observation, budget_left):
        return "human" if observation.step == observation.horizon - 1 else self.answer


def test_a_gate_names_the_kind_and_a_bare_yes_is_refused():
    records = run_episodes(make_episodes("train", 40, 5), make_agent(), gate=KindGate(None),
                           helps=own_helps((1, 2, 4)), budget=4, rng_seed=5)
    last = [rows[-1] for rows in records if len(rows) == 6]
    assert last and all(row.help_kind == "human" and row.help_cost == 4.0 for row in last)
    assert not any(row.intervened for rows in records for row in rows[:-1])
    with pytest.raises(ValueError, match="answered True with several kinds of help; answer the name of the kind"):
        run_episodes(make_episodes("train", 2, 5), make_agent(), gate=KindGate(True), helps=own_helps((1, 2, 4)),
                     budget=4)


class ChoosingGate:
    """A gate of several kinds (as ``TieredHelperGate``): the loop asks its ``choose`` with the exact rest."""

    kinds = NAMES

    def __init__(self):
        self.asked = []

    def choose(self, observation, budget_left=None, calls_left=None, proposal=None):
        self.asked.append((observation.episode_id, budget_left, dict(calls_left)))
        return "compute" if budget_left >= 0.5 else None

    def should_intervene(self, observation, budget_left=None, proposal=None):
        raise AssertionError("a gate of several kinds is asked choose(), not should_intervene()")


def test_a_gate_of_several_kinds_is_asked_choose_with_the_exact_cost_and_calls_left():
    gate = ChoosingGate()
    helps = [Help("compute", None, 0.5, 3), Help("stronger", None, 2.0), Help("human", None, 4.0)]
    records = run_episodes(make_episodes("train", 6, 5), make_agent(), gate=gate, helps=helps, budget=2.5, rng_seed=1)
    asked = {}
    for episode, left, calls in gate.asked:
        asked.setdefault(episode, []).append((left, calls.get("compute")))
    for episode, rows in zip(make_episodes("train", 6, 5), records):
        # compute while its cap of 3 holds (1.5 of 2.5 spent, never rounded); then nothing is affordable: not asked
        assert [r.help_kind for r in rows] == ["compute" if k < 3 else "" for k in range(len(rows))]
        assert asked[episode.episode_id] == [(2.5 - 0.5 * k, 3 - k) for k in range(min(len(rows), 3))]


@pytest.mark.parametrize("kwargs, refused", [
    (dict(helps=[Help("oracle")], explore_p=1.0), "help 'oracle' has no agent, and episode 'rapids-train-0-0' "
                                                  "offers no expert of that kind"),
    (dict(helps=[Help("human"), Help("human")]), "kind name 'human' is empty or given twice"),
    (dict(helps=[Help("human", price=-1)]), "help 'human': price=-1"),
    (dict(helps=[Help("human", cap=-1)]), "cap=-1"),
    (dict(helps=[Help("human", weight=0)]), "weight=0"),
    (dict(helps=[Help("human")], strong=HelpAgent("human")), "give strong (one kind of help) or helps"),
    (dict(helps=[Help("human")], counterfactual=True), "Collect them without counterfactual"),
])
def test_a_wrong_help_is_refused_in_one_line(kwargs, refused):
    with pytest.raises(ValueError) as error:
        run_episodes(rapids.make_episodes("train", 2, 0), rapids.make_agent(), budget=4, **kwargs)
    assert refused in str(error.value) and "\n" not in str(error.value)
