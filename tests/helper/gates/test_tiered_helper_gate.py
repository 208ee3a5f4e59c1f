"""``TieredHelperGate``: the gate says which help to call, plays the solved tiered table exactly, and never lets an
episode exceed its cost budget or a kind's cap, in any order or thread; saved and loaded as one helper folder."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from tiered_rows import PRICES, RiskScorer, play, rapids_rows

from agile.protocol import Observation
from examples.tiered_rapids import HORIZON, KINDS, RISKS, make_episodes
from examples.tiered_rapids_optimum import true_model
from helper import HelperGate
from helper.gates.tiered_helper_gate import TieredHelperGate
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, TieredSolution, estimate_tiered, evaluate_table, solve_tiered

BUDGET, CAPS = 6, {"human": 1}


@pytest.fixture(scope="module")
def solved():
    rows = rapids_rows(1500, seed=0)
    disc = Discretizer(3, "uniform").fit(rows["prm_score"], rows["step"])
    model = estimate_tiered(rows, disc, kinds=tuple(KINDS), objective="success")
    resources = Resources.of(list(PRICES.values()), BUDGET, caps=[None, None, 1], horizon=model.horizon)
    return solve_tiered(model, resources), disc


def test_the_gate_plays_the_table_exactly_and_within_budget(solved):
    solution, disc = solved
    gate = TieredHelperGate(solution, disc, RiskScorer())
    assert gate.budget == BUDGET and gate.caps == CAPS and gate.kinds == tuple(KINDS)
    # Each answer is the table's at (step, risk, budget left, human calls left), brute force from the spends so far.
    spent, human = 0.0, 0
    for step in range(HORIZON):
        for risk in RISKS:
            obs = Observation("probe", "rapids", "t", step, f"crossing with {risk} water, marker 3", HORIZON, {})
            want = solution.kind(step, RISKS.index(risk), BUDGET - spent, {"human": 1 - human})
            assert gate.choose(obs) == want
            spent += PRICES[want] if want else 0.0
            human += want == "human"
    assert gate.used("probe") == spent <= BUDGET and gate.calls("probe").get("human", 0) == human <= 1
    gate.end_episode("probe")
    # Online, on the true river: the success the exact evaluation promises (the table on the true dynamics),
    # within 4 standard errors, and no episode over its budget or its human cap.
    truth = true_model()
    promised = evaluate_table(truth, solution.resources, solution.tables[0][:, :truth.n_states]).expected_success
    runs = play(gate, 3000)
    success = np.array([s for s, _, _ in runs])
    assert abs(success.mean() - promised) < 4 * success.std() / np.sqrt(len(success)) + 1e-9
    assert max(c for _, c, _ in runs) <= BUDGET and max(calls.get("human", 0) for _, _, calls in runs) <= 1
    # The table mixes kinds: every kind is called somewhere.
    assert {k for _, _, calls in runs for k in calls} == set(KINDS)
    assert gate.live_episodes() == 0 and gate.stats()["fallbacks"] == 0


def test_sixteen_threads_on_the_same_episodes_never_exceed_budget_or_cap(solved):
    solution, disc = solved
    gate = TieredHelperGate(solution, disc, RiskScorer(), budget=5, caps={"human": 1, "stronger": 1})
    assert gate.caps == {"human": 1, "stronger": 1}  # a tighter cap than the solved one (none on stronger) binds
    start = threading.Barrier(16)

    def ask(t):
        start.wait()
        said = []
        for i in range(40):  # steps out of order, replayed, every risk, 4 episodes shared by all threads
            step, risk, episode = (i * 5 + t) % HORIZON, RISKS[(i + t) % 3], f"e{i % 4}"
            obs = Observation(episode, "rapids", "t", step, f"crossing with {risk} water, marker 1", HORIZON, {})
            said.append((episode, gate.choose(obs)))
        return said

    with ThreadPoolExecutor(16) as pool:
        answers = [a for result in pool.map(ask, range(16)) for a in result]
    for e in ("e0", "e1", "e2", "e3"):
        granted = [k for ep, k in answers if ep == e and k]
        assert sum(PRICES[k] for k in granted) == gate.used(e) <= 5
        assert granted.count("human") <= 1 and granted.count("stronger") <= 1
        assert {k: granted.count(k) for k in set(granted)} == gate.calls(e)
    # A caller's own count binds where smaller: nothing is affordable with 0.5 left.
    obs = Observation("fresh", "rapids", "t", 5, "crossing with dangerous water, marker 1", HORIZON, {})
    assert gate.choose(obs, budget_left=0.5) is None and gate.used("fresh") == 0


def test_saved_and_loaded_as_a_helper_folder(solved, tmp_path):
    solution, disc = solved
    TieredHelperGate(solution, disc, trained_on={"horizon": HORIZON}).save(tmp_path / "helper")
    config = json.loads((tmp_path / "helper" / "helper.json").read_text())
    assert config["kinds"] == list(KINDS) and config["prices"] == PRICES and config["caps"] == CAPS
    assert config["backend"] == "tiered_table" and config["cost_budget"] == BUDGET and config["horizon"] == HORIZON
    gate = HelperGate.load(tmp_path / "helper", budget=4)
    assert isinstance(gate, TieredHelperGate) and gate.budget == 4 and gate.horizon == HORIZON
    # No PRM recorded: the conservative rule with kinds — the cheapest kind whose price covers every step left.
    first = Observation("a", "rapids", "t", 0, "crossing with calm water, marker 1", HORIZON, {})
    late = Observation("a", "rapids", "t", 4, "crossing with calm water, marker 1", HORIZON, {})
    assert gate.choose(first) is None and gate.choose(late) == "compute" and gate.stats()["fallbacks"] == 2
    gate.scorer = RiskScorer()  # with the cue, the loaded table answers as the saved one
    same = TieredHelperGate(solution, disc, RiskScorer(), budget=4)
    for step in range(HORIZON):
        for risk in RISKS:
            obs = Observation(f"x{step}{risk}", "rapids", "t", step, f"{risk} water, marker 2", HORIZON, {})
            assert gate.choose(obs) == same.choose(obs)
    with pytest.raises(ValueError, match="tiered helper"):
        HelperGate.load(tmp_path / "helper", backend="table")


@pytest.mark.parametrize("field, value, says", [
    ("prices", {"compute": float("nan"), "stronger": 2, "human": 4}, "prices="),
    ("prices", {"compute": 0, "stronger": 2, "human": 4}, "finite prices > 0"),
    ("prices", {"compute": 1, "stronger": 2}, "must name every kind"),
    ("caps", {"oracle": 1}, "must name only kind"),
    ("caps", {"human": -1}, "whole numbers of calls >= 0"),
    ("kinds", ["compute", "compute"], "distinct"),
])
def test_an_edited_helper_json_is_refused_naming_the_field(solved, tmp_path, field, value, says):
    solution, disc = solved
    folder = TieredHelperGate(solution, disc).save(tmp_path / "helper")
    config = json.loads((folder / "helper.json").read_text())
    (folder / "helper.json").write_text(json.dumps(config | {field: value}))
    with pytest.raises(ValueError, match=f"{field}=") as error:
        HelperGate.load(folder)
    assert says in str(error.value)


def test_a_one_kind_helper_chooses_its_one_kind():
    class Always:
        feature_names = ("budget_left",)

        def predict_proba(self, row):
            return [1.0]

    gate = HelperGate("features", Always(), solved_budget=2, trained_on={"horizon": 4})
    gate.scorer = RiskScorer()
    obs = [Observation("one", "rapids", "t", t, "calm water", 4, {}) for t in range(4)]
    assert [gate.choose(o) for o in obs] == ["intervene", "intervene", None, None]
    assert gate.choose(Observation("two", "rapids", "t", 0, "calm", 4, {}), calls_left={"intervene": 0}) is None
    assert gate.used("one") == 2 and gate.used("two") == 0


def test_a_mixture_of_two_tables_plays_one_table_per_episode(solved):
    """A Lagrangian solution mixes two tables: each episode plays one whole, drawn from its id (the same id, the same
    table, on any server), ``mix`` of them the first. Here the solved table mixed with never calling, at 0.3."""
    solution, disc = solved
    rows = rapids_rows(1500, seed=0)
    model = estimate_tiered(rows, disc, kinds=tuple(KINDS), objective="success")
    never = np.zeros_like(solution.tables[0])
    mixed = TieredSolution.evaluated(model, solution.resources, "lagrangian", (solution.tables[0], never), mix=0.3)
    gate = TieredHelperGate(mixed, disc, RiskScorer())
    drawn = [gate.table_of(f"test-{i}") for i in range(3000)]
    assert drawn == [TieredHelperGate(mixed, disc).table_of(f"test-{i}") for i in range(3000)]
    runs = play(gate, 3000)
    ids = [e.episode_id for e in make_episodes("test", 3000, 7)]
    plays_first = np.array([gate.table_of(e) == 0 for e in ids])
    assert abs(plays_first.mean() - 0.3) < 0.03
    spent = np.array([c for _, c, _ in runs])
    assert not spent[~plays_first].any() and spent.max() <= BUDGET  # the never table's episodes call nothing
    # The first table's episodes spend as the table alone does on the same episodes.
    alone = np.array([c for _, c, _ in play(TieredHelperGate(solution, disc, RiskScorer()), 3000)])
    assert np.array_equal(spent[plays_first], alone[plays_first])
