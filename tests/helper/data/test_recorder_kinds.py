"""``Recorder`` with several kinds of help: ``should_intervene`` names a kind the budget and caps allow, ``log`` writes
the kind and its cost, refuses a call past the budget or a cap, and the folder reads back with its kinds; a Recorder
of one kind refuses kinds. The invariant is checked with hypothesis over callers that log whatever they like."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agile.protocol import Observation
from helper import Recorder
from trajectories.helps import HelpKind
from trajectories.manifest import ConfigMismatch, helps_of
from trajectories.shards import read_trajectories

PRICES = {"compute": 1, "stronger": 2, "human": 4}


def obs(episode: str, step: int) -> Observation:
    return Observation(episode, "my-env", "task", step, f"state {step}", 6)


def record(rec: Recorder, episodes: int, steps: int = 6) -> None:
    for e in range(episodes):
        for t in range(steps):
            kind = rec.should_intervene(obs(f"e{e}", t))
            rec.log(obs(f"e{e}", t), "help" if kind else "own", "strong" if kind else "base", kind=kind)
        rec.end_episode(1.0)


def test_the_drawn_kind_and_its_cost_are_written_and_read_back(tmp_path):
    with Recorder(tmp_path, explore_p=0.8, budget=6, helps=PRICES, caps={"human": 1}) as rec:
        record(rec, 40)
    rows = read_trajectories(tmp_path)
    called = rows.filter(pl.col("help_kind") != "")
    assert set(called["help_kind"]) == set(PRICES)
    assert called["help_cost"].to_list() == [float(PRICES[k]) for k in called["help_kind"]]
    spent = rows.group_by("episode_id").agg(pl.col("help_cost").sum(), (pl.col("help_kind") == "human").sum())
    assert spent["help_cost"].max() <= 6 and spent["help_kind"].max() <= 1
    assert helps_of(tmp_path) == [HelpKind("compute", 1), HelpKind("stronger", 2), HelpKind("human", 4, 1)]


def test_a_metered_cost_is_written_and_the_price_spent(tmp_path):
    with Recorder(tmp_path, explore_p=0.0, budget=2.5, helps={"compute": 2}) as rec:
        rec.log(obs("e", 0), "think harder", "strong", kind="compute", cost=1.75)
        assert rec.budget_left("e") == 0.5  # the count spends the price: a metered call never passes the budget
        with pytest.raises(ValueError, match="'compute' costs 2 with 0.5 of the budget 2.5 left"):
            rec.log(obs("e", 1), "again", "strong", kind="compute")
        with pytest.raises(ValueError, match="a call costs from 0 up to its kind's price"):
            rec.log(obs("e", 1), "again", "strong", kind="compute", cost=2.5)
        rec.log(obs("e", 1), "own", "base")
        rec.end_episode(0.0)
    assert read_trajectories(tmp_path)["help_cost"].to_list() == [1.75, 0.0]


@pytest.mark.parametrize("log, refused", [
    (dict(actor="strong", kind="oracle"), "kind 'oracle' is not among this Recorder's helps"),
    (dict(actor="strong"), "actor 'strong' with kind ''; an intervention names the kind it called"),
    (dict(actor="base", kind="human"), "actor 'base' with kind 'human'"),
    (dict(actor="base", cost=1.0), "cost=1.0 on the agent's own action"),
    (dict(actor="strong", kind="human", cost=-1), "cost=-1 for 'human'; a call costs from 0 up to its kind's price"),
])
def test_a_wrong_call_is_refused_and_nothing_is_logged(tmp_path, log, refused):
    rec = Recorder(tmp_path, budget=6, helps=PRICES)
    with pytest.raises(ValueError, match=refused):
        rec.log(obs("e", 0), "text", **log)
    rec.log(obs("e", 0), "own", "base")  # step 0 is still free: the refused call left no row


def test_a_drawn_kind_must_be_the_one_logged(tmp_path):
    rec = Recorder(tmp_path, explore_p=1.0, budget=6, helps={"compute": 1, "human": 4})
    kind = rec.should_intervene(obs("e", 0))
    other = "human" if kind == "compute" else "compute"
    with pytest.raises(ValueError, match=f"should_intervene named {kind!r}, but the call is logged as {other!r}"):
        rec.log(obs("e", 0), "text", "strong", kind=other)
    with pytest.raises(ValueError, match="logged as actor 'base'"):
        rec.log(obs("e", 0), "text", "base")


def test_one_kind_refuses_kinds_and_other_kinds_are_refused_on_resume(tmp_path):
    rec = Recorder(tmp_path / "one", budget=2)
    with pytest.raises(ValueError, match="this Recorder records one kind of help; construct it with helps="):
        rec.log(obs("e", 0), "text", "strong", kind="human")
    with pytest.raises(ValueError, match="caps and weights are of kinds of help"):
        Recorder(tmp_path / "two", caps={"human": 1})
    with pytest.raises(ValueError, match="caps or weights name 'oracle'"):
        Recorder(tmp_path / "two", helps=PRICES, caps={"oracle": 1})
    with Recorder(tmp_path / "kinds", budget=6, helps=PRICES) as rec:
        record(rec, 2)
    with pytest.raises(ConfigMismatch, match="helps="):
        Recorder(tmp_path / "kinds", budget=6, helps={"compute": 1})


@settings(max_examples=30, deadline=None)
@given(moves=st.lists(st.tuples(st.sampled_from(["", *PRICES]), st.one_of(st.none(), st.sampled_from([0.5, 3.0]))),
                      min_size=1, max_size=12),
       cap=st.integers(0, 2), budget=st.sampled_from([0, 1.5, 4, 6]))
def test_whatever_the_caller_logs_no_episode_passes_its_budget_or_cap(tmp_path_factory, moves, cap, budget):
    out = tmp_path_factory.mktemp("rec")
    with Recorder(out, explore_p=0.5, budget=budget, helps=PRICES, caps={"human": cap}) as rec:
        for step, (kind, cost) in enumerate(moves):
            if drawn := rec.should_intervene(obs("e", step)):  # the draw names an affordable kind: it is logged
                rec.log(obs("e", step), "help", "strong", kind=drawn)
                continue
            try:  # the caller's own call, at its own cost: past the budget or a cap it is refused
                rec.log(obs("e", step), "text", "strong" if kind else "base", kind=kind, cost=cost if kind else None)
            except ValueError:
                rec.log(obs("e", step), "own", "base")
        rec.end_episode(1.0, "e")
    rows = read_trajectories(out)
    assert rows.height == len(moves)
    assert rows["help_cost"].sum() <= budget + 1e-9
    assert (rows["help_kind"] == "human").sum() <= cap
