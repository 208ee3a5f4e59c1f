"""Deciding after the base agent's proposal: the loop, the logged columns, the PRM rendering and
scorer, and the helper end to end on a tiny PRM."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np
import polars as pl
import pytest

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.scripted_answers import question_type
from agile.executor.episode import make_episodes
from agile.functions import PREDICT_ANSWER as PREDICT
from agile.functions import SEARCH_PRODUCT as SEARCH
from agile.functions import SEARCH_RESULT as SEARCH_RESULT_HEADER
from agile.models import load_tokenizer
from agile.protocol import BASE, Action, Observation, StepResult
from agile.rollout import run_episodes
from agile.seeding import stable_uniform
from prm.data.folds import task_type
from prm.inputs.render import Renderer, prefix_keys, step_pieces
from trajectories.number_maps import mapping, number_maps
from trajectories.schema import SchemaError
from trajectories.shards import read_trajectories, write_shard
from trajectories.shards import mark_complete


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


class CountingSimulator(SimulatorAgent):
    """The simulator agent, counting every observation it is asked to act on."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.asked = Counter()

    def act(self, observations, episodes=None):
        self.asked.update((o.episode_id, o.step, o.state_text) for o in observations)
        return super().act(observations, episodes=episodes)


class SearchingAgent:
    """On a search question first writes a query the table refuses (a tool round: the executor shows the
    error and asks again), then answers; answers other questions with "yes".

    Every action carries a signal, so the test sees the final action's signals carried through."""

    name = "searching"

    def __init__(self):
        self.asked = Counter()

    def act(self, observations):
        self.asked.update((o.episode_id, o.step, o.state_text) for o in observations)
        actions = []
        for o in observations:
            asked = o.state_text.rsplit("[GetQuestion]", 1)[-1]
            if question_type(o) == "search_qa" and SEARCH_RESULT_HEADER not in asked:
                actions.append(Action(f"{SEARCH} SELECT product_id FROM no_such_table;", BASE, {"round": 0.0}))
            else:
                actions.append(Action(f"{PREDICT} yes", BASE, {"round": 1.0, "logprob": -0.25}))
        return actions


class ProposalGate:
    """Reads proposals; intervenes at the steps given, and records what it was shown."""

    decide_after = "proposal"

    def __init__(self, steps=()):
        self.steps = set(steps)
        self.shown: dict[tuple[str, int], Action] = {}

    def should_intervene(self, observation, budget_left, proposal=None):
        assert proposal is not None and budget_left > 0
        self.shown[(observation.episode_id, observation.step)] = proposal
        return observation.step in self.steps


class StepGate:
    """A gate of the old kind (two arguments): intervenes at the steps given."""

    def __init__(self, steps=()):
        self.steps = set(steps)

    def should_intervene(self, observation, budget_left):
        return observation.step in self.steps


def _episodes(n=12, horizon=4, seed=3):
    return make_episodes(default_catalog_dir(0), "train", n=n, seed=seed, questions_per_episode=horizon)


def _rows(records):
    return [r.to_row() for episode in records for r in episode]


def test_gate_reads_the_proposal_and_the_base_agent_is_asked_once_per_decision():
    agent = SearchingAgent()
    gate = ProposalGate(steps={1})
    records = run_episodes(_episodes(), agent, gate=gate, budget=1)
    rows = _rows(records)
    searched = [r for r in rows if r["action_text"].startswith(SEARCH) or r["proposal_text"].startswith(SEARCH)]
    assert searched, "the catalog has search questions: tool rounds must be exercised"
    # Every observation (each tool round of each decision) reached the agent exactly once.
    assert set(agent.asked.values()) == {1}
    assert {(e, s) for e, s, _ in agent.asked} == {(r["episode_id"], r["step"]) for r in rows}
    for r in rows:
        key = (r["episode_id"], r["step"])
        if r["budget_left"] > 0:
            assert gate.shown[key].text == r["proposal_text"]
            assert gate.shown[key].signals == mapping(r["proposal_signals"]) == {"logprob": -0.25, "round": 1.0}
        else:
            assert key not in gate.shown  # no budget: no gate call, the action is the proposal
        if not r["intervened"]:
            assert r["action_text"] == r["proposal_text"] and r["reward"] == r["proposal_reward"]
    assert any(r["intervened"] for r in rows)
    # A search decision's transcript is the call, the tool output, then the answer.
    kept = next(r for r in searched if not r["intervened"])
    call, output, answer = kept["action_text"].split("\n")
    assert call.startswith(SEARCH) and output.startswith(SEARCH_RESULT_HEADER) and answer == f"{PREDICT} yes"


def test_counterfactual_works_in_proposal_mode():
    agent = CountingSimulator(seed=0)
    records = run_episodes(_episodes(n=4, horizon=3), agent, gate=ProposalGate(steps={0}), budget=1,
                           counterfactual=True)
    rows = _rows(records)
    assert all(r["cf_base_success"] is not None and r["cf_intervene_success"] is not None for r in rows)
    # Intervening at step 0 and the base agent later: the counterfactual of intervening there.
    for episode in records:
        assert episode[0].intervened and episode[0].cf_intervene_success == episode[0].success


def test_replay_gives_the_state_mode_trajectory():
    """The same interventions (exploration draws and an old two-argument gate) with and without
    proposals give the same rows, proposals aside; the base agent is asked once per decision."""
    common = dict(budget=2, explore_p=0.3, rng_seed=7)
    state = _rows(run_episodes(_episodes(), CountingSimulator(seed=0), gate=StepGate({2}), **common))
    agent = CountingSimulator(seed=0)
    proposal = _rows(run_episodes(_episodes(), agent, gate=StepGate({2}), decide_after="proposal", **common))
    assert any(r["intervened"] for r in state)
    drop = ("proposal_text", "proposal_reward", "proposal_signals")
    assert [{k: v for k, v in r.items() if k not in drop} for r in proposal] == \
        [{k: v for k, v in r.items() if k not in drop} for r in state]
    assert all(r["proposal_text"] == "" and r["proposal_reward"] is None for r in state)
    assert set(agent.asked.values()) == {1} and len(agent.asked) == len(proposal)


def test_proposal_reward_is_logged_where_an_intervention_replaced_it():
    agent = SimulatorAgent(seed=0)
    rows = _rows(run_episodes(_episodes(n=24), agent, budget=2, explore_p=0.5, rng_seed=1, decide_after="proposal"))
    intervened = [r for r in rows if r["intervened"]]
    assert len(intervened) >= 10 and all(r["actor"] == "human" and r["reward"] == 1.0 for r in intervened)
    # The simulator is right where its draw falls below its accuracy for the question type.
    for r in rows:
        right = stable_uniform(0, r["episode_id"], r["step"], "simulator") < agent.accuracy[task_type(r["task_id"])]
        assert r["proposal_reward"] == float(right)
    assert {r["proposal_reward"] for r in intervened} == {0.0, 1.0}
    assert all(r["proposal_text"].startswith(PREDICT) for r in rows)


def test_a_state_mode_run_refuses_a_proposal_gate():
    with pytest.raises(ValueError, match="decide_after='proposal'"):
        run_episodes(_episodes(n=1), SimulatorAgent(), gate=ProposalGate(), budget=1, decide_after="state")


# -- rendering --------------------------------------------------------------------------------------
def _proposal_episode(n):
    states = [f"state {t} " + "word " * 4 for t in range(n)]
    proposals = [f"propose {t}" for t in range(n)]
    actions = [p if t % 2 == 0 else f"expert {t}" for t, p in enumerate(proposals)]
    return states, actions, proposals


def test_proposal_rendering_keeps_prefixes_and_tags_the_proposal():
    tokenizer = load_tokenizer("tiny")
    renderer = Renderer(tokenizer, tag_after="proposal")
    states, actions, proposals = _proposal_episode(5)
    full = renderer.render_many([(states, actions, proposals)])[0]
    for k in range(1, 6):
        part = renderer.render_many([(states[:k], actions[:k], proposals[:k])])[0]
        end = part.tag_pos[-1] + 1
        assert part.ids[:end] == full.ids[:end] and part.tag_pos == full.tag_pos[:k]
    cursor = 0
    for t, pos in enumerate(full.tag_pos):
        before, after = step_pieces(t, states[t], actions[t], "proposal", proposals[t])
        assert before.endswith(f"\nProposal: {proposals[t]}")
        assert after == ("\nKept." if actions[t] == proposals[t] else f"\nAction: {actions[t]}")
        ids_before = tokenizer(before, add_special_tokens=False)["input_ids"]
        # The tag comes right after the proposal, and the action right after the tag.
        assert full.ids[cursor:cursor + len(ids_before)] == ids_before
        cursor += len(ids_before) + len(renderer.tag_ids)
        assert cursor - 1 == pos
        cursor += len(tokenizer(after, add_special_tokens=False)["input_ids"])
    # Prefix keys read the proposals: another proposal is another input.
    other = list(proposals)
    other[2] = "something else"
    keys, changed = prefix_keys(states, actions, "proposal", proposals), prefix_keys(states, actions, "proposal", other)
    assert keys[:2] == changed[:2] and keys[2] != changed[2]
    with pytest.raises(ValueError, match="proposal"):
        renderer.render_many([(states, actions)])


@pytest.fixture(scope="module")
def tiny_proposal_prm():
    from helper_data import tiny_scoring_prm

    return tiny_scoring_prm("proposal")


def test_scorer_reads_proposals_and_reproduces_logged_scores(tiny_proposal_prm):
    from prm.scoring.scorer import PrmScorer

    states, actions, proposals = _proposal_episode(4)
    logged = tiny_proposal_prm.score_episodes([(states, actions, proposals)])[0]  # what `prm score` writes
    assert np.unique(np.round(logged, 6)).size == 4
    for incremental in (True, False):
        scorer = PrmScorer(tiny_proposal_prm, incremental=incremental)
        assert scorer.decide_after == "proposal" and scorer.incremental == incremental
        online = []
        for t in range(4):
            observation = Observation("ep", "test", "t", t, states[t], 4, {})
            # Asked first with another proposal, then with the real one: the score follows the proposal.
            scorer.score(observation, Action("a different proposal"))
            online.append(scorer.score(observation, Action(proposals[t])))
            scorer.record_action(observation, actions[t])
        assert online == pytest.approx(logged.tolist(), abs=1e-5)
        with pytest.raises(ValueError, match="proposal"):
            scorer.score(Observation("ep2", "test", "t", 0, states[0], 4, {}))


# -- data -------------------------------------------------------------------------------------------
def test_older_datasets_without_proposal_columns_still_load(tmp_path):
    from prm.training.train import TrainConfig, run_train

    records = run_episodes(_episodes(n=8), SimulatorAgent(seed=0), budget=1, explore_p=0.3, decide_after="proposal")
    frame = pl.DataFrame(_rows(records)).drop(["cf_base_success", "cf_intervene_success"])
    old = frame.drop(["proposal_text", "proposal_reward", "proposal_signals"])
    write_shard(old.filter(pl.col("episode_id").is_in(old["episode_id"].unique().sort()[:4].to_list())),
                tmp_path / "old" / "a.parquet")
    write_shard(old, tmp_path / "only-old" / "a.parquet")
    write_shard(frame.filter(~pl.col("episode_id").is_in(old["episode_id"].unique().sort()[:4].to_list())),
                tmp_path / "old" / "b.parquet")
    mark_complete(tmp_path / "old")
    mark_complete(tmp_path / "only-old")
    mixed = read_trajectories(tmp_path / "old")
    assert mixed.height == frame.height
    before = mixed.filter(pl.col("proposal_text") == "")
    assert before.height == 4 * 4 and before["proposal_reward"].null_count() == before.height
    assert number_maps(before["proposal_signals"]) == [{}] * before.height
    assert "proposal_text" not in read_trajectories(tmp_path / "only-old").columns  # as written
    with pytest.raises(SchemaError, match="--decide-after proposal"):
        run_train(TrainConfig(data=str(tmp_path / "only-old"), out=str(tmp_path / "prm"), model="tiny",
                              tag_after="proposal", progress=False, folds=2))
    bad = frame.with_columns(pl.lit("[1, 2]").alias("proposal_signals"))
    with pytest.raises(SchemaError, match="proposal_signals"):
        write_shard(bad, tmp_path / "bad.parquet")


def test_collect_logs_decide_after_and_resumes_older_folders(tmp_path):
    from helper.data.collect import CollectConfig, run
    from helper.data.environment import EnvSpec

    out = tmp_path / "traj"
    three = EnvSpec(questions_per_episode=3)
    config = CollectConfig(spec=three, out=str(out), episodes=4, shard_size=2, explore_p=[0.5],
                           decide_after="proposal")
    run(config)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["decide_after"] == "proposal"
    frame = read_trajectories(out)
    assert (frame["proposal_text"] != "").all() and frame["proposal_reward"].null_count() == 0
    # A folder collected before the option (no decide_after in its manifest) resumes as state.
    state = tmp_path / "state"
    run(CollectConfig(spec=three, out=str(state), episodes=4, shard_size=2))
    stored = json.loads((state / "manifest.json").read_text())
    del stored["config"]["decide_after"]
    (state / "manifest.json").write_text(json.dumps(stored))
    assert run(CollectConfig(spec=three, out=str(state), episodes=4, shard_size=2))["episodes"] == 4
    with pytest.raises(ValueError, match="decide_after"):
        run(CollectConfig(spec=three, out=str(state), episodes=4, shard_size=2, decide_after="proposal"))


# -- end to end -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def proposal_helper(tmp_path_factory):
    """collect (simulator, proposal mode) -> prm train --tag-after proposal (tiny) -> score -> solve -> distill."""
    from helper.data import collect
    from helper.data.environment import EnvSpec
    from helper.solve import distill, solve_command
    from prm.scoring import score as prm_score
    from prm.training import train as prm_train

    root = tmp_path_factory.mktemp("proposal-run")
    data = str(root / "trajectories")
    collect.run(collect.CollectConfig(spec=EnvSpec(questions_per_episode=3), out=data, episodes=24, shard_size=12,
                                      explore_p=[0.0, 0.3, 0.6], budget=2, decide_after="proposal"))
    report = prm_train.run_train(prm_train.TrainConfig(data=data, out=str(root / "prm"), model="tiny",
                                                       tag_after="proposal", folds=3, progress=False))
    prm_score.run_score(prm_score.ScoreConfig(data=data, model=str(root / "prm"), progress=False))
    solve_command.run(solve_command.SolveConfig(data=data, budgets=[1, 2], bins=3, out=str(root / "solve")))
    distill.run(distill.DistillConfig(labels=str(root / "solve"), prm=str(root / "prm"), out=str(root / "helper")))
    return root, report


def test_prm_trains_on_proposals_with_the_proposal_target(proposal_helper):
    root, report = proposal_helper
    assert report["target"] == "label_proposal" and report["outcome"] == "proposal reward >= 0.5"
    assert report["folds"]["k"] == 3 and report["oof_auroc"] is not None
    scored = read_trajectories(root / "trajectories")
    oof = pl.read_parquet(root / "prm" / "oof_scores.parquet").sort("episode_id", "step")
    # prm score wrote every training episode's out-of-fold score (its proposal rendering matched).
    joined = scored.join(oof, on=["episode_id", "step"], suffix="_oof")
    assert joined.height == scored.height and (joined["prm_score"] == joined["prm_score_oof"]).all()


def test_helper_decides_after_the_proposal_within_budget(proposal_helper):
    from helper import HelperGate

    root, _ = proposal_helper
    assert json.loads((root / "helper" / "helper.json").read_text())["decide_after"] == "proposal"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the PRM loads and scores
        gate = HelperGate.load(root / "helper", budget=1)
    assert gate.decide_after == "proposal" and gate.scorer is not None
    agent = CountingSimulator(seed=0)
    records = run_episodes(_episodes(n=8, horizon=3, seed=99), agent, gate=gate, budget=1)
    rows = _rows(records)
    assert all(sum(r.intervened for r in episode) <= 1 for episode in records)
    assert gate.stats()["decisions"] > 0 and gate.stats()["fallbacks"] == 0 and gate.stats()["score_errors"] == 0
    assert set(agent.asked.values()) == {1} and all(r["proposal_text"] for r in rows)
    # The score the gate acted on is the PRM's score of state and proposal.
    from prm.verifiers.load import load_prm

    prm = load_prm(root / "prm", device="cpu")
    first = records[0][0]
    expected = prm.score_episodes([([first.state_text], [first.action_text], [first.proposal_text])])[0][0]
    observation = Observation(first.episode_id + "-again", first.env, first.task_id, 0, first.state_text, 3, {})
    assert gate.scorer.score(observation, Action(first.proposal_text)) == pytest.approx(float(expected), abs=1e-5)


def test_served_helper_needs_and_reads_the_proposal(proposal_helper):
    from fastapi.testclient import TestClient

    from helper import HelperGate
    from helper.serve.gate_server import ServedGate, create_app

    root, _ = proposal_helper
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The classifier: it reads the executor's features (the member chosen for a cap reads the score alone).
        helper = HelperGate.load(root / "helper", budget=1, backend="features")
        member = HelperGate.load(root / "helper", budget=1)
    assert member.backend == "table" and member.member is not None
    client = TestClient(create_app(ServedGate(helper), horizon=3))
    assert client.get("/health").json()["decide_after"] == "proposal"
    request = {"episode_id": "e1", "step": 0, "state_text": "Question 1 of 3.\nCustomer: is it red?"}
    featureless = client.post("/v1/gate", json=request | {"proposal": f"{PREDICT} yes"})
    # Names what the helper reads (the executor's memory features).
    assert featureless.status_code == 422 and "memory_advice_hits" in featureless.text
    request["features"] = {"memory_advice_hits": 0.0}
    refused = client.post("/v1/gate", json=request)
    assert refused.status_code == 422 and "proposal" in refused.text
    answer = client.post("/v1/gate", json=request | {"proposal": f"{PREDICT} yes"})
    assert answer.status_code == 200
    observation = Observation("fresh", "", "", 0, request["state_text"], 3, request["features"])
    expected = helper.intervene_probability(observation, 1, Action(f"{PREDICT} yes"))
    assert answer.json()["score"] == pytest.approx(expected, abs=1e-6)
    # The member reads the PRM's score of the proposal: refused without one, the in-process answer with one.
    client = TestClient(create_app(ServedGate(member), horizon=3))
    assert client.post("/v1/gate", json=request).status_code == 422
    answer = client.post("/v1/gate", json=request | {"proposal": f"{PREDICT} yes", "episode_id": "e2"})
    expected = member.intervene_probability(observation, 1, Action(f"{PREDICT} yes"))
    assert answer.status_code == 200 and answer.json()["score"] == pytest.approx(expected, abs=1e-6)


class AlternatingEpisode:
    """An environment that is not deterministic given actions: its reward alternates with every
    step call made anywhere (as a random tool would differ between a clone and a replay)."""

    env = "alternating"
    calls = 0

    def __init__(self, episode_id="alt", position=0):
        self.episode_id, self.position = episode_id, position

    def observe(self):
        return Observation(self.episode_id, self.env, "t", self.position, f"step {self.position}", 2)

    def step(self, action):
        type(self).calls += 1
        self.position += 1
        return StepResult(float(type(self).calls % 2), self.done)

    def expert_action(self):
        return Action("expert", actor="human")

    @property
    def done(self):
        return self.position >= 2

    def success(self):
        return 1.0

    def clone(self):
        return AlternatingEpisode(self.episode_id, self.position)


class SayAnything:
    name = "say"

    def act(self, observations):
        return [Action("anything") for _ in observations]


def test_a_replay_that_differs_is_logged_as_played_and_warned():
    AlternatingEpisode.calls = 0
    with pytest.warns(UserWarning, match="not deterministic given the actions"):
        records = run_episodes([AlternatingEpisode()], SayAnything(), budget=2, decide_after="proposal")
    first = records[0][0]
    # The clone's step was call 1 (reward 1), the replay on the episode call 2 (reward 0).
    assert not first.intervened and first.proposal_reward == 1.0 and first.reward == 0.0
    assert first.action_text == first.proposal_text == "anything"
