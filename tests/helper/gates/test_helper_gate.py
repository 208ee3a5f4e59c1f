"""HelperGate and baseline gates: budget invariant, thread safety, fallback, save/load, rollout."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.catalog_generator import default_catalog_dir
from agile.executor.episode import AgileSource
from agile.executor.executor import ExecutorConfig
from agile.protocol import Observation
from agile.rollout import run_episodes
from helper import HelperGate
from helper.gates.simple import (
    AlwaysGate,
    FirstKGate,
    NeverGate,
    OracleGate,
    RandomGate,
    ScoreThresholdGate,
    calibrate_threshold,
)
from agile.budget import BudgetedGate
from helper.gates.features import FeatureClassifier, frame_features, observation_features
from productqa_slice import SLICE


def obs(episode="e0", step=0, horizon=6, **features) -> Observation:
    return Observation(episode, "test", "t", step, f"state {step}", horizon, dict(features))


class ScriptedGate(BudgetedGate):
    """Wants whatever the script says next (cycled): arbitrary decision sequences."""

    def __init__(self, script, budget):
        super().__init__(budget)
        self.script = list(script) or [True]
        self.calls = 0

    def wants(self, observation, budget_left):
        self.calls += 1
        return self.script[self.calls % len(self.script)]


calls = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 7), st.one_of(st.none(), st.integers(0, 4))),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(calls=calls, budget=st.integers(0, 3), script=st.lists(st.booleans(), max_size=5))
def test_never_intervenes_once_budget_spent(calls, budget, script):
    gate = ScriptedGate(script, budget)
    granted: dict[str, int] = {}
    for episode, step, budget_left in calls:  # steps in any order: a smaller step never resets
        said = gate.should_intervene(obs(episode, step), budget_left)
        if said:
            assert budget_left is None or budget_left > 0
            granted[episode] = granted.get(episode, 0) + 1
            assert granted[episode] <= budget
        assert gate.used(episode) == granted.get(episode, 0)


def test_no_budget_known_is_an_error():
    with pytest.raises(ValueError, match="budget_left"):
        AlwaysGate().should_intervene(obs())
    assert AlwaysGate().should_intervene(obs(), 1) is True
    assert AlwaysGate().should_intervene(obs(), 0) is False


def test_threads_share_the_gate_safely():
    gate = ScriptedGate([True, False, True], budget=2)

    def play(episode: int) -> int:
        return sum(gate.should_intervene(obs(f"ep{episode}", step)) for step in range(6))

    with ThreadPoolExecutor(max_workers=8) as pool:
        used = list(pool.map(play, range(400)))
    assert max(used) <= 2
    assert all(gate.used(f"ep{i}") == used[i] for i in range(400))

    # Many threads deciding the same decision point at once still grant at most the budget.
    same = AlwaysGate(budget=3)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: same.should_intervene(obs("one", 2)), range(200)))
    assert sum(answers) == 3


def test_baselines():
    assert not NeverGate(budget=3).should_intervene(obs())
    first = FirstKGate(2)
    assert [first.should_intervene(obs(step=t)) for t in range(4)] == [True, True, False, False]
    rand = RandomGate(0.5, budget=10, seed=1)
    draws = [rand.should_intervene(obs(f"e{i}", 0)) for i in range(2000)]
    assert 0.45 < np.mean(draws) < 0.55
    again = RandomGate(0.5, budget=10, seed=1)
    assert draws == [again.should_intervene(obs(f"e{i}", 0)) for i in range(2000)]
    # 10 distinct scores, 5 decisions per episode, budget 1 -> the 20% quantile: 2 of 10 at or below.
    threshold = calibrate_threshold(np.arange(10) / 10, 5, 1)
    assert threshold == pytest.approx(0.1) and (np.arange(10) / 10 <= threshold).sum() == 2
    assert calibrate_threshold([0.1], 5, 0) == -math.inf and calibrate_threshold([0.1], 5, 5) == math.inf
    gate = ScoreThresholdGate(lambda o: o.features["s"], 0.5, budget=1)
    assert not gate.should_intervene(obs(step=0, s=0.7))
    assert gate.should_intervene(obs(step=1, s=0.5))
    assert not gate.should_intervene(obs(step=2, s=0.1))  # budget spent
    oracle = OracleGate.from_counterfactuals(["a"] * 4, [0, 1, 2, 3], [0.5, 0.5, 0.5, 0.5],
                                             [0.6, 0.5, 0.9, 0.7], budget=2)
    assert [oracle.should_intervene(obs("a", t)) for t in range(4)] == [False, False, True, True]
    # Through the episode loop (the Gate protocol the rollout calls), 3 episodes of 5 decisions with a
    # budget of 2: each gate's interventions land exactly where its rule says, and never past the budget.
    source = AgileSource(default_catalog_dir(0), "test", model=None, memory="lexical")
    for gate, steps in ((NeverGate(), []), (AlwaysGate(), [0, 1]), (FirstKGate(1), [0]),
                        (RandomGate(1.0, seed=3), [0, 1]), (FirstKGate(4), [0, 1])):
        records = run_episodes(source.episodes(range(3), 3, 5), SimulatorAgent(seed=0), gate=gate, budget=2)
        assert [[r.step for r in rows if r.intervened] for rows in records] == [steps] * 3, gate.name


def _training_frame(n: int = 300, seed: int = 0) -> tuple[pl.DataFrame, np.ndarray]:
    """Rows where the right call is: intervene on hard questions while budget lasts."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.4
    frame = pl.DataFrame({
        "episode_id": [f"e{i // 6}" for i in range(n)], "step": np.arange(n) % 6, "horizon": [6] * n,
        "budget_left": rng.integers(1, 3, n), "prm_score": np.where(hard, 0.2, 0.8) + rng.normal(0, 0.05, n),
        "features": [f'{{"type_reasoning_qa": {float(h)}}}' for h in hard],
    })
    return frame, hard.astype(int)


@pytest.fixture(scope="module")
def helper_dir(tmp_path_factory):
    frame, y = _training_frame()
    names = ["prm_score", "step", "progress", "budget_left", "budget_per_step", "f_type_reasoning_qa"]
    main = FeatureClassifier("gbm", names).fit(frame_features(frame, names), y)
    plain = [n for n in names if n != "prm_score"]
    fallback = FeatureClassifier("logreg", plain).fit(frame_features(frame, plain), y)
    directory = tmp_path_factory.mktemp("helper")
    HelperGate("features", main, fallback, solved_budget=2).save(directory, prm=str(directory / "no-prm-here"))
    return directory


def test_save_load_and_fallback(helper_dir):
    with pytest.warns(UserWarning, match="could not load the PRM"):
        gate = HelperGate.load(helper_dir)
    assert gate.budget == 2 and gate.scorer is None
    # No PRM: the fallback classifier (trained without the score) still reads the question type.
    assert gate.should_intervene(obs("x", 0, type_reasoning_qa=1.0))
    assert not gate.should_intervene(obs("x", 1, type_reasoning_qa=0.0))
    assert gate.stats()["fallbacks"] == 2

    class Scorer:
        def score(self, observation):
            if observation.step == 3:
                raise RuntimeError("scoring failed")
            return 0.2 if observation.features["type_reasoning_qa"] else 0.8

    gate.scorer = Scorer()
    assert gate.should_intervene(obs("y", 0, type_reasoning_qa=1.0))
    with pytest.warns(UserWarning, match="PRM scoring failed"):
        assert gate.should_intervene(obs("y", 3, type_reasoning_qa=1.0))
    assert not gate.should_intervene(obs("y", 4, type_reasoning_qa=1.0))  # budget of 2 spent
    assert gate.stats()["score_errors"] == 1


def test_conservative_rule_without_any_classifier():
    gate = HelperGate("features", FeatureClassifier("logreg", ["prm_score"]), budget=2, solved_budget=2)
    # No scorer and no fallback: intervene only when the budget covers every remaining decision.
    assert not gate.should_intervene(obs("z", 0, horizon=4))
    assert gate.should_intervene(obs("z", 2, horizon=4)) and gate.should_intervene(obs("z", 3, horizon=4))


def test_plugs_into_run_episodes(helper_dir):
    root = default_catalog_dir(0)
    agent = SimulatorAgent(seed=0)
    with pytest.warns(UserWarning):
        gate = HelperGate.load(helper_dir, budget=1)
    # This helper reads the question-type indicator, which episodes give only as the gold-features ablation.
    source = AgileSource(root, "test", model=None, memory="lexical", config=ExecutorConfig(gold_features=True))
    episodes = source.episodes(range(6), 3, 5)
    records = run_episodes(episodes, agent, gate=gate, budget=1)
    used = [sum(r.intervened for r in episode) for episode in records]
    assert max(used) <= 1 and sum(used) > 0
    # features row from an observation matches the row builder used in training
    o = obs("w", 2, horizon=6, type_reasoning_qa=1.0)
    names = ["prm_score", "step", "progress", "steps_left", "budget_left", "budget_per_step", "f_type_reasoning_qa"]
    row = observation_features(o, 2, 0.3, names)
    frame = pl.DataFrame({"episode_id": ["w"], "step": [2], "horizon": [6], "budget_left": [2],
                          "prm_score": [0.3], "features": ['{"type_reasoning_qa": 1.0}']})
    assert np.allclose(row, frame_features(frame, names))


@pytest.fixture(scope="module")
def tiny_prm():
    from helper_data import tiny_scoring_prm

    return tiny_scoring_prm("state")


def test_prm_scorer_reproduces_logged_scores(tiny_prm):
    from prm.scoring.scorer import PrmScorer

    states = ["Question 1 of 3 (fact_qa).\nCustomer: is it red?", "Question 2 of 3 (search_qa).\nFind a kettle.",
              "Question 3 of 3 (fact_qa).\nIs it big?"]
    actions = ["[PredictAnswer] yes", "[PredictAnswer] B01", "[PredictAnswer] no"]
    logged = tiny_prm.score_episodes([(states, actions)])[0]  # what `helpgate prm score` writes
    assert np.unique(np.round(logged, 6)).size == 3
    for incremental in (True, False):  # key/value cache per episode, or the whole prefix each time
        scorer = PrmScorer(tiny_prm, incremental=incremental)
        assert scorer.incremental == incremental
        online = []
        for step, (state, action) in enumerate(zip(states, actions, strict=True)):
            observation = Observation("ep", "test", "t", step, state, 3, {})
            online.append(scorer.score(observation))  # before the action exists
            scorer.record_action(observation, action)
        assert online == pytest.approx(logged.tolist(), abs=1e-5)

    # A gate with that PRM uses the score (no fallback) and stays within its budget.
    frame, y = _training_frame()
    names = ["prm_score", "step", "budget_left", "f_type_reasoning_qa"]
    gate = HelperGate("features", FeatureClassifier("logreg", names).fit(frame_features(frame, names), y),
                      scorer=scorer, budget=1, solved_budget=2)
    said = [gate.should_intervene(Observation("g", "test", "t", t, states[t], 3, {"type_reasoning_qa": 1.0}))
            for t in range(3)]
    assert sum(said) <= 1 and gate.stats()["fallbacks"] == 0



def test_a_prm_threshold_gate_passes_the_actions_on_so_it_reads_the_logged_scores(tiny_prm):
    """The threshold on the PRM score is told each action by the episode loop, as the helper is: without it the
    PRM rendered earlier actions empty and the baseline played on other scores than its level was set on."""
    from prm.scoring.scorer import PrmScorer

    states = ["Question 1 of 3 (fact_qa).\nCustomer: is it red?", "Question 2 of 3 (search_qa).\nFind a kettle.",
              "Question 3 of 3 (fact_qa).\nIs it big?"]
    actions = ["[PredictAnswer] yes", "[PredictAnswer] B01", "[PredictAnswer] no"]
    logged = tiny_prm.score_episodes([(states, actions)])[0]
    scorer = PrmScorer(tiny_prm)
    seen = []
    gate = ScoreThresholdGate(scorer.score, threshold=-1.0, budget=1)  # never fires: only what it reads matters
    assert gate.scorer is scorer and ScoreThresholdGate(lambda o: 0.5, 0.5).scorer is None
    for step, (state, action) in enumerate(zip(states, actions, strict=True)):
        observation = Observation("thr", "test", "t", step, state, 3, {})
        assert not gate.should_intervene(observation)
        seen.append(scorer.score(observation))
        gate.record_action(observation, action)  # what run_episodes calls after each decision
    assert seen == pytest.approx(logged.tolist(), abs=1e-5)
    gate.end_episode("thr")
    assert "thr" not in scorer._history  # the scorer's history freed with the gate's count

def test_prm_scorer_keeps_lockstep_caches_within_its_memory_budget(tiny_prm):
    """Many episodes stepped in lockstep keep their caches while they fit the byte budget; a
    small budget drops the least recently used, and scores never change."""
    from prm.scoring.scorer import PrmScorer

    episodes = [[f"Question {t + 1} of 3 (fact_qa).\nCustomer: is item {e}-{t} red?" for t in range(3)]
                for e in range(24)]
    expected = [tiny_prm.score_episodes([(states, ["[PredictAnswer] yes"] * 3)])[0] for states in episodes]
    big = PrmScorer(tiny_prm)
    small = PrmScorer(tiny_prm, cache_bytes=250 * big.token_bytes())  # about two whole episodes
    for scorer_budget, scorer in (("big", big), ("small", small)):
        for t in range(3):
            for e, states in enumerate(episodes):
                observation = Observation(f"ep{e}", "test", "t", t, states[t], 3, {})
                assert scorer.score(observation) == pytest.approx(float(expected[e][t]), abs=1e-5)
                scorer.record_action(observation, "[PredictAnswer] yes")
        held = [entry for entry in scorer._history.values() if entry.cache is not None]
        if scorer_budget == "big":
            assert len(held) == 24  # nothing dropped: every decision fed only its new tokens
        else:
            assert 1 <= len(held) < 24
            assert sum(entry.fed for entry in held) * scorer.token_bytes() <= scorer.cache_bytes


def test_prm_scorer_memo_scores_a_shared_prefix_once(tiny_prm):
    """A second play of the same episode (another id, as the sweep's next method) reuses the
    scores of the prefix it shares, without a forward pass, and after the first different action
    scores what the PRM gives its own prefix: the cache catches up over the skipped steps."""
    from prm.scoring.scorer import PrmScorer

    states = ["Question 1 of 3.\nCustomer: is it red?", "Question 2 of 3.\nFind a kettle.",
              "Question 3 of 3.\nIs it big?"]
    first = ["[PredictAnswer] yes", "[PredictAnswer] B01", "[PredictAnswer] no"]
    second = ["[PredictAnswer] yes", "[SeekAdvice]", "[PredictAnswer] no"]
    scorer = PrmScorer(tiny_prm)
    for episode_id, actions in (("a", first), ("b", second)):
        logged = tiny_prm.score_episodes([(states, actions)])[0]
        for t, state in enumerate(states):
            observation = Observation(episode_id, "test", "t", t, state, 3, {})
            if episode_id == "b" and t < 2:  # the shared prefix: a forward pass would fail
                forward, scorer._incremental = scorer._incremental, None
                assert scorer.score(observation) == pytest.approx(float(logged[t]), abs=1e-5)
                scorer._incremental = forward
            else:
                assert scorer.score(observation) == pytest.approx(float(logged[t]), abs=1e-5)
            scorer.record_action(observation, actions[t])
    assert scorer.memo_hits == 2 and scorer.forward_scores == 4
    assert scorer._history["b"].fed > 0 and scorer._history["b"].next_step == 3

    off = PrmScorer(tiny_prm, memo_size=0)  # no memo: every play is scored again
    for episode_id in ("a", "b"):
        for t, state in enumerate(states):
            observation = Observation(episode_id, "test", "t", t, state, 3, {})
            off.score(observation)
            off.record_action(observation, first[t])
    assert off.memo_hits == 0


def test_prm_scorer_branches_feed_only_their_own_steps(tiny_prm):
    """Plays of one episode that branch (as a sweep's methods do) resume from the kept cache of the prefix they
    share: each miss feeds its own step's tokens only, and every score is the whole prefix's score."""
    from prm.scoring.scorer import PrmScorer

    states = ["Question 1 of 3.\nCustomer: is it red?", "Question 2 of 3.\nFind a kettle.",
              "Question 3 of 3.\nIs it big?"]
    plays = {"a": ["yes", "B01", "no"], "b": ["yes", "[SeekAdvice]", "no"], "c": ["[SeekAdvice]", "B01", "no"]}

    def play(scorer):
        fed_per_miss = []
        for episode_id, actions in plays.items():
            logged = tiny_prm.score_episodes([(states, actions)])[0]
            for t, state in enumerate(states):
                observation = Observation(episode_id, "test", "t", t, state, 3, {})
                before = (scorer.fed_tokens, scorer.forward_scores)
                assert scorer.score(observation) == pytest.approx(float(logged[t]), abs=1e-5)
                if scorer.forward_scores > before[1]:
                    own = len(scorer._step_ids(scorer._history[episode_id], t, with_action=t > 0))
                    fed_per_miss.append((scorer.fed_tokens - before[0], own))
                scorer.record_action(observation, actions[t])
        return fed_per_miss

    kept = play(PrmScorer(tiny_prm))
    assert len(kept) == 3 + 1 + 2  # a: every step; b: the step after its branch; c: the two after its branch
    assert all(fed == own for fed, own in kept)
    trunk = play(PrmScorer(tiny_prm, prefix_bytes=0))  # nothing kept: a branch feeds the shared trunk again
    assert sum(fed for fed, _ in trunk) > sum(fed for fed, _ in kept)
    small = PrmScorer(tiny_prm, prefix_bytes=40 * PrmScorer(tiny_prm).token_bytes())
    play(small)  # scores unchanged however little is kept, and the kept prefixes stay within their bytes
    assert small._prefix_held * small.token_bytes() <= small.prefix_bytes


def test_prm_scorer_restarts_its_cache_past_the_context(tiny_prm):
    """A long episode: scores match the logged ones while the prefix fits; past the context the
    cache starts over on recent steps (never more than the context), with no full re-scoring."""
    from prm.scoring.scorer import PrmScorer

    states = [f"Move {t}. You are in room {t % 3} and see item {t}." for t in range(12)]
    logged = tiny_prm.score_episodes([(states, ["go east"] * 12)])[0]
    scorer = PrmScorer(tiny_prm)
    per_step = len(scorer._step_ids(_entry_with(states), 1, with_action=True))
    tiny_prm.settings.max_length = 5 * per_step  # five steps fit
    try:
        scorer._full = None  # a call would fail: the restart must keep every decision incremental
        for t, state in enumerate(states):
            observation = Observation("long", "test", "t", t, state, 12, {})
            value = scorer.score(observation)
            scorer.record_action(observation, "go east")
            entry = scorer._history["long"]
            assert 0.0 < value < 1.0 and entry.fed <= tiny_prm.context
            if t < 4:
                assert value == pytest.approx(float(logged[t]), abs=1e-5)
    finally:
        tiny_prm.settings.max_length = None


def _entry_with(states):
    from prm.scoring.scorer import _Episode

    entry = _Episode(0)
    entry.states = dict(enumerate(states))
    entry.actions = {t: "go east" for t in range(len(states))}
    return entry


def test_prm_scorer_warns_for_post_action_tags(tiny_prm):
    from prm.scoring.scorer import PrmScorer

    tiny_prm.settings.tag_after = "action"
    try:
        with pytest.warns(UserWarning, match="tag_after='state'"):
            PrmScorer(tiny_prm)
    finally:
        tiny_prm.settings.tag_after = "state"


def test_helper_decides_advice_in_agile_eval(helper_dir, tmp_path):
    """`helpgate agile eval --helper DIR`: the helper's advice beside the policy's own."""
    from agile.envs.productqa import load_split
    from helper.evaluation.agile_advice import AgileEvalConfig, run

    groups = ["leggings", "motherboards"]
    # The helper reads the question-type indicator: the executor gives it only as the gold-features ablation.
    cfg = AgileEvalConfig(model="tiny", data_root=str(SLICE), groups=groups, questions_per_group=6, budget=3,
                          max_new_tokens=4, out=str(tmp_path), helper=str(helper_dir), device="cpu",
                          gold_features=True)
    with pytest.warns(UserWarning, match="could not load the PRM"):
        rows = run(cfg, log=lambda *_: None)
    by = {(r["mode"], r["group"]): r for r in rows}
    assert {m for m, _ in by} == {"policy", "gate:HelperGate"}
    # The helper's fallback asks on reasoning questions, within the budget of 3 per episode.
    for group in load_split(SLICE, "test"):
        if group.name in groups:
            reasoning = sum(q.type == "reasoning_qa" for q in group.questions[:6])
            assert by[("gate:HelperGate", group.name)]["advice_rate"] == pytest.approx(min(reasoning, 3) / 6)


def test_helper_finds_its_prm_after_the_run_folder_moves(tiny_prm, tmp_path):
    """The helper folder records its PRM relative to itself (a run folder moved whole keeps
    working) and absolute (a helper folder moved alone still finds it)."""
    import shutil

    frame, y = _training_frame()
    names = ["prm_score", "step", "budget_left"]
    run = tmp_path / "run"
    tiny_prm.save(run / "prm")
    HelperGate("features", FeatureClassifier("logreg", names).fit(frame_features(frame, names), y),
               solved_budget=2).save(run / "helper", prm=str(run / "prm"))
    config = json.loads((run / "helper" / "helper.json").read_text())
    assert config["prm"] == "../prm" and Path(config["prm_absolute"]).is_absolute()

    alone = Path(shutil.copytree(run / "helper", tmp_path / "deploy" / "helper"))  # ../prm is not there
    assert HelperGate.load(alone).scorer is not None
    moved = Path(shutil.move(run, tmp_path / "elsewhere"))  # the whole run: the absolute path is stale
    assert HelperGate.load(moved / "helper").scorer is not None
    with pytest.warns(UserWarning, match=r"could not load the PRM at .*deploy/prm"):  # names where it looked
        assert HelperGate.load(alone).scorer is None
