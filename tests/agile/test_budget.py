"""The budget guarantee: per episode_id a gate never grants more than its budget, whatever the
order of the calls, replays or threads; a count restarts only with end_episode / reset."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agile.budget import BudgetedGate, EpisodeBudget, TooManyEpisodes, largest_budget
from agile.protocol import Observation
from helper.gates.helper_gate import HelperGate

EPISODES = ["a", "b", "c", "d"]


def obs(episode="e0", step=0, horizon=8) -> Observation:
    return Observation(episode, "test", "t", step, f"state {step}", horizon, {})


class TableGate(BudgetedGate):
    """Wants a fixed answer per (episode, step): the same under any thread interleaving."""

    def __init__(self, wanted: dict, budget: int | None):
        super().__init__(budget)
        self.wanted = wanted

    def wants(self, observation, budget_left):
        return self.wanted.get((observation.episode_id, observation.step), True)


def test_the_reported_replay_is_held_to_the_budget():
    # Issue: budget=2, one episode_id at steps 0,1,2,3,0,1,2 granted 4 interventions.
    gate = TableGate({}, budget=2)
    said = [gate.should_intervene(obs("one", t)) for t in (0, 1, 2, 3, 0, 1, 2)]
    assert said == [True, True, False, False, False, False, False]
    assert gate.used("one") == 2
    gate.end_episode("one")  # the only ways to restart: end_episode ...
    assert gate.used("one") == 0 and gate.should_intervene(obs("one", 0))
    gate.reset()  # ... and reset
    assert gate.used("one") == 0 and gate.live_episodes() == 0


def test_budget_zero_means_never():
    assert not TableGate({}, budget=0).should_intervene(obs(), 5)
    assert not TableGate({}, budget=0).should_intervene(obs())
    # A helper solved for budget 0 clips what the classifier sees to 0 (no truthiness skip).
    seen = []

    class Recorder:
        feature_names = ("budget_left",)

        def predict_proba(self, row):
            seen.append(float(row[0, 0]))
            return [1.0]

    gate = HelperGate("features", Recorder(), solved_budget=0)
    assert gate.budget == 0 and not gate.should_intervene(obs(), 3)
    gate.scorer = type("S", (), {"score": lambda self, o: 0.5})()
    assert gate.intervene_probability(obs(), 3) == 1.0 and seen == [0.0]


def test_no_silent_eviction():
    gate = TableGate({}, budget=1)
    gate.max_episodes = 3
    for e in "xyz":
        assert gate.should_intervene(obs(e, 0))
    with pytest.raises(TooManyEpisodes, match="end_episode"):
        gate.should_intervene(obs("w", 0))
    # The live episodes kept their counts: none of them was dropped to make room.
    assert [gate.should_intervene(obs(e, 1)) for e in "xyz"] == [False, False, False]
    gate.end_episode("x")
    assert gate.should_intervene(obs("w", 0))
    # An episode that was never granted anything holds no count.
    never = TableGate({("q", 0): False}, budget=1)
    assert not never.should_intervene(obs("q", 0)) and never.live_episodes() == 0


ops = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.sampled_from(EPISODES), st.integers(0, 6),
                  st.one_of(st.none(), st.integers(0, 4))),
        st.tuples(st.just("end"), st.sampled_from(EPISODES)),
        st.tuples(st.just("reset")),
    ),
    max_size=80,
)
wanted = st.dictionaries(st.tuples(st.sampled_from(EPISODES), st.integers(0, 6)), st.booleans())


@settings(max_examples=300, deadline=None)
@given(ops=ops, wanted=wanted, budget=st.integers(0, 3))
def test_sequential_interleavings_match_brute_force(ops, wanted, budget):
    """Steps in any order and replays: each answer equals the brute-force rule."""
    gate = TableGate(wanted, budget)
    granted: dict[str, int] = {}
    for op in ops:
        if op[0] == "end":
            gate.end_episode(op[1])
            granted.pop(op[1], None)
        elif op[0] == "reset":
            gate.reset()
            granted.clear()
        else:
            _, episode, step, budget_left = op
            left = budget - granted.get(episode, 0)
            if budget_left is not None:
                left = min(left, budget_left)
            expected = left > 0 and wanted.get((episode, step), True)
            assert gate.should_intervene(obs(episode, step), budget_left) == expected
            granted[episode] = granted.get(episode, 0) + int(expected)
            assert granted[episode] <= budget
        assert all(gate.used(e) == granted.get(e, 0) for e in EPISODES)


threaded_calls = st.lists(st.lists(st.tuples(st.sampled_from(EPISODES), st.integers(0, 6)), min_size=1, max_size=12),
                          min_size=16, max_size=16)


@settings(max_examples=25, deadline=None)
@given(calls=threaded_calls, wanted=wanted, budget=st.integers(0, 3))
def test_sixteen_threads_never_exceed_the_budget(calls, wanted, budget):
    """16 threads answer the same episodes at once, steps out of order and replayed."""
    gate = TableGate(wanted, budget)
    start = threading.Barrier(16)

    def play(thread_calls):
        start.wait()
        return [(e, gate.should_intervene(obs(e, t))) for e, t in thread_calls]

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [a for result in pool.map(play, calls) for a in result]
    for episode in EPISODES:
        grants = sum(said for e, said in answers if e == episode)
        assert grants == gate.used(episode) <= budget
        # And not fewer: every wanted call is granted until the budget is spent.
        wanted_calls = sum(1 for thread in calls for e, t in thread if e == episode and wanted.get((e, t), True))
        assert grants == min(budget, wanted_calls)


def test_threads_on_one_episode_with_a_slow_decision():
    """The decision runs outside the lock: many threads past the first check still grant budget."""
    slow = threading.Event()

    class Slow(BudgetedGate):
        def wants(self, observation, budget_left):
            slow.wait(0.001)
            return True

    gate = Slow(budget=3)
    with ThreadPoolExecutor(max_workers=16) as pool:
        said = list(pool.map(lambda t: gate.should_intervene(obs("same", t % 5)), range(400)))
    assert sum(said) == 3 == gate.used("same")


def test_evaluate_replays_episodes_with_a_fresh_count(tmp_path):
    """run_episodes ends each finished episode, so the same ids replayed get their full budget."""
    from agile.agents.simulator_agent import SimulatorAgent
    from agile.envs.catalog_generator import default_catalog_dir
    from agile.executor.episode import make_episodes
    from agile.rollout import run_episodes

    gate = TableGate({}, budget=2)
    root = default_catalog_dir(0)
    for _ in range(2):  # the same held-out episodes, twice
        records = run_episodes(make_episodes(root, "test", n=3, seed=3, questions_per_episode=4),
                               SimulatorAgent(seed=0), gate=gate, budget=2)
        assert [sum(r.intervened for r in episode) for episode in records] == [2, 2, 2]
    assert gate.live_episodes() == 0


# -- the one counting object ----------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(calls=threaded_calls, budget=st.integers(0, 3), budget_left=st.one_of(st.none(), st.integers(0, 4)))
def test_episode_budget_under_sixteen_threads_never_exceeds_its_budget(calls, budget, budget_left):
    """16 threads spend the same episodes at once: never more than the budget, and not fewer while
    the budget lasts (a caller's count of 0 refuses every call; a positive one is its own snapshot)."""
    count = EpisodeBudget(budget)
    start = threading.Barrier(16)

    def spend(thread_calls):
        start.wait()
        return [(e, count.spend(e, budget_left)) for e, _ in thread_calls]

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [a for result in pool.map(spend, calls) for a in result]
    cap = 0 if budget_left == 0 else budget
    for episode in EPISODES:
        asks = sum(1 for e, _ in answers if e == episode)
        grants = sum(said for e, said in answers if e == episode)
        assert grants == count.used(episode) == min(cap, asks)
        assert count.left(episode) == budget - grants


def test_episode_budget_without_a_limit_never_refuses_and_ends_cleanly():
    count = EpisodeBudget(None)
    assert count.left("a") is None and count.left("a", 2) == 2  # the caller's count still binds
    assert all(count.spend("a") for _ in range(50)) and count.used("a") == 50
    assert not count.spend("a", budget_left=0)
    twin = count.copy()
    twin.spend("a")
    assert (twin.used("a"), count.used("a")) == (51, 50)  # a copy counts apart (a cloned episode)
    count.end("a")
    assert count.used("a") == 0 and count.live() == 0
    with pytest.raises(ValueError, match="budget=-1"):
        EpisodeBudget(-1)
    small = EpisodeBudget(1, max_episodes=1)
    small.spend("x")
    with pytest.raises(TooManyEpisodes, match="holds 1 live episodes"):
        small.spend("y")


def test_the_loop_and_the_gate_count_with_the_one_class(monkeypatch):
    """run_episodes and every BudgetedGate spend through EpisodeBudget (the executor: test_agile_executor)."""
    from agile.agents.simulator_agent import SimulatorAgent
    from agile.envs.catalog_generator import default_catalog_dir
    from agile.executor.episode import make_episodes
    from agile.rollout import run_episodes

    owners = []
    spend = EpisodeBudget.spend

    def counted(self, key, budget_left=None):
        owners.append(self.owner)
        return spend(self, key, budget_left)

    monkeypatch.setattr(EpisodeBudget, "spend", counted)
    gate = TableGate({}, budget=1)
    records = run_episodes(make_episodes(default_catalog_dir(0), "test", n=2, seed=3, questions_per_episode=4),
                           SimulatorAgent(seed=0), gate=gate, budget=2)
    assert [sum(r.intervened for r in episode) for episode in records] == [1, 1]  # the gate's 1 binds
    # The gate's, the loop's, and the executor's own count of the advice it gave (no limit of its own).
    assert owners.count("TableGate") == 2 and owners.count("EpisodeBudget") == 4
    assert isinstance(gate._episode_budget, EpisodeBudget)


def test_the_default_largest_budget_is_what_always_spends():
    assert largest_budget(4) == 4  # before anything ran: the horizon
    assert largest_budget(8, always_used=5.2) == 6  # measured: always's mean, rounded up
    assert largest_budget(8, always_used=3.0 + 1e-12) == 3  # not one more for a rounding error


def test_the_recorder_counts_with_it_too(tmp_path):
    from helper.data.recorder import Recorder

    rec = Recorder(tmp_path / "rec", explore_p=1.0, budget=1)
    assert isinstance(rec._budget, EpisodeBudget)
    assert [rec.should_intervene(obs("r", t)) for t in (0, 0, 1)] == [True, True, False]  # asked twice, spent once
    assert rec.budget_left("r") == 0 and rec.budget_left("new") == 1


# -- kinds of help, each at its price (agile.tiered_budget) -----------------------------------------
from fractions import Fraction  # noqa: E402

from agile.tiered_budget import TieredBudget  # noqa: E402

PRICES = {"compute": 1, "stronger": 2, "human": 4}
KIND_NAMES = list(PRICES)

kind_ops = st.lists(
    st.one_of(
        st.tuples(st.just("spend"), st.sampled_from(EPISODES), st.sampled_from(KIND_NAMES),
                  st.one_of(st.none(), st.integers(0, 8))),
        st.tuples(st.just("end"), st.sampled_from(EPISODES)),
    ),
    max_size=80,
)
kind_caps = st.dictionaries(st.sampled_from(KIND_NAMES), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(ops=kind_ops, budget=st.integers(0, 12), caps=kind_caps)
def test_kinds_in_any_order_match_brute_force(ops, budget, caps):
    """Each spend equals the brute-force rule (price within what is left, the caller's count included; the
    kind's cap not spent); the total and each cap hold after every call."""
    count = TieredBudget(PRICES, budget, caps)
    spent: dict[str, int] = {}
    calls: dict[str, dict[str, int]] = {}
    for op in ops:
        if op[0] == "end":
            count.end(op[1])
            spent.pop(op[1], None)
            calls.pop(op[1], None)
            continue
        _, episode, kind, budget_left = op
        left = budget - spent.get(episode, 0)
        if budget_left is not None:
            left = min(left, budget_left)
        made = calls.get(episode, {})
        expected = PRICES[kind] <= left and made.get(kind, 0) < caps.get(kind, 99)
        assert count.affordable(episode, budget_left).__contains__(kind) == expected
        assert count.spend(episode, kind, budget_left) == expected
        if expected:
            spent[episode] = spent.get(episode, 0) + PRICES[kind]
            calls.setdefault(episode, {})[kind] = made.get(kind, 0) + 1
        assert spent.get(episode, 0) <= budget
        assert all(calls.get(episode, {}).get(k, 0) <= cap for k, cap in caps.items())
    for e in EPISODES:
        assert count.used(e) == spent.get(e, 0) and count.calls(e) == calls.get(e, {})
        assert count.left(e) == budget - spent.get(e, 0)
        assert count.calls_left(e) == {k: cap - calls.get(e, {}).get(k, 0) for k, cap in caps.items()}


kind_threads = st.lists(st.lists(st.tuples(st.sampled_from(EPISODES), st.sampled_from(KIND_NAMES)),
                                 min_size=1, max_size=12), min_size=16, max_size=16)


@settings(max_examples=25, deadline=None)
@given(calls=kind_threads, budget=st.integers(0, 12), caps=kind_caps)
def test_sixteen_threads_never_exceed_the_total_nor_a_cap(calls, budget, caps):
    """16 threads spend the same episodes with every kind at once: the granted calls of each episode cost at most
    the budget, each kind at most its cap, and the count holds exactly what was granted."""
    count = TieredBudget(PRICES, budget, caps)
    start = threading.Barrier(16)

    def spend(thread_calls):
        start.wait()
        return [(e, k, count.spend(e, k)) for e, k in thread_calls]

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [a for result in pool.map(spend, calls) for a in result]
    for episode in EPISODES:
        granted = [k for e, k, ok in answers if e == episode and ok]
        assert sum(PRICES[k] for k in granted) == count.used(episode) <= budget
        for kind in KIND_NAMES:
            assert granted.count(kind) == count.calls(episode).get(kind, 0) <= caps.get(kind, 99)
        # Not fewer either: spends only shrink what is left, so a kind affordable at the end was affordable at
        # every moment before; a refusal of it would have been wrong.
        refused = {k for e, k, ok in answers if e == episode and not ok}
        assert not refused & set(count.affordable(episode))


def test_one_kind_at_price_one_is_the_episode_budget_and_prices_add_up_exactly():
    one, plain = TieredBudget({"intervene": 1}, 2), EpisodeBudget(2)
    assert [one.spend("a", "intervene") for _ in range(3)] == [plain.spend("a") for _ in range(3)]
    assert one.used("a") == plain.used("a") == 2
    tenths = TieredBudget({"look": 0.1}, 1)
    assert sum(tenths.spend("a", "look") for _ in range(12)) == 10  # floats would refuse the tenth (0.1 * 10 > 1)
    assert tenths.left("a") == 0.0 and tenths.prices["look"] == Fraction(1, 10)
    # The caller's own counts bind where smaller, as EpisodeBudget's budget_left does.
    caps = TieredBudget(PRICES, 12, {"human": 2})
    assert not caps.spend("b", "human", calls_left={"human": 0}) and caps.spend("b", "human", budget_left=4)
    assert not caps.spend("b", "stronger", budget_left=1) and caps.calls_left("b", {"compute": 1}) == {
        "human": 1, "compute": 1}
    assert TieredBudget({"x": 1}, None).left("a") is None  # no total: only caps limit
    free = TieredBudget({"look": 0, "ask": 1}, 0, {"look": 2})  # a free kind: only its cap limits it
    assert [free.spend("a", "look") for _ in range(3)] == [True, True, False] and not free.spend("a", "ask")


@pytest.mark.parametrize("prices, budget, caps, says", [
    ({"x": -1}, 1, None, "price of 'x' is -1: give a price >= 0"),
    ({"x": float("nan")}, 1, None, "price of 'x'=nan: give a finite number"),
    ({"x": 1}, -1, None, "budget=-1"),
    ({"x": 1}, 1, {"y": 1}, "cap on 'y': not a kind of help here (x)"),
    ({"x": 1}, 1, {"x": -1}, "cap on 'x' is -1"),
    ({}, 1, None, "name at least one kind"),
])
def test_tiered_budget_refuses_what_cannot_be_counted(prices, budget, caps, says):
    with pytest.raises(ValueError) as error:
        TieredBudget(prices, budget, caps)
    assert says in str(error.value)


def test_tiered_budget_keeps_live_episodes_and_refuses_unknown_kinds():
    count = TieredBudget(PRICES, 4, max_episodes=1)
    assert count.spend("x", "compute")
    with pytest.raises(TooManyEpisodes, match="holds 1 live episodes"):
        count.spend("y", "compute")
    with pytest.raises(ValueError, match="kind 'oracle'"):
        count.spend("x", "oracle")
    count.end("x")
    assert count.spend("y", "human") and count.live() == 1 and not count.spend("y", "compute")
