"""The compute help (``agile.executor.self_consistency``): the majority rule on hand-made samples, the vote against
brute force over the model's own log-probabilities, determinism per decision seed, the greedy turn where every
sample is it, and the base agent's model reused. Tiny random-initialised models, the bundled ProductQA slice."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from productqa_slice import SLICE

from agile import functions as fn
from agile.envs.phrasing import is_yes_no_question
from agile.executor.consistency import answer_key, draw, majority
from agile.executor.constrained import _turn_options
from agile.executor.episode import AgileSource
from agile.executor.executor import ExecutorConfig
from agile.executor.self_consistency import DEFAULT_SAMPLES, SelfConsistencyAgent, samples_of
from agile.rollout import decide, decision_seed

K = 8


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def source(yes_no_threshold: float = 0.0) -> AgileSource:
    return AgileSource(SLICE, "train", model="tiny", decoding="constrained", memory="lexical", max_new_tokens=6,
                       config=ExecutorConfig(yes_no_threshold=yes_no_threshold))


@pytest.fixture(scope="module")
def plain():
    return source()


def first_turns(src: AgileSource, agent, indices, seed: int = 0) -> dict[str, tuple[int, ...]]:
    """Each episode's first decision played by ``agent`` (fresh episodes, one batch): its turn's token ids."""
    episodes = src.episodes(indices, 0, 2)
    decisions = decide(episodes, [agent] * len(episodes), seed)
    return {e.episode_id: d.actions[-1].token_ids for e, d in zip(episodes, decisions)}


def test_majority_rule_on_hand_made_samples():
    assert majority(["a", "b", "a", "c"], "b", {}) == "a"  # most votes win over the greedy turn
    assert majority(["a", "b", "a", "b"], "b", {"a": -0.1, "b": -5.0}) == "b"  # a tie keeps the greedy turn
    tie = ["a", "b", "b", "a", "g"]  # a tie without it: the more probable turn, whatever the order drawn
    assert majority(tie, "g", {"a": -1.0, "b": -0.5}) == "b"
    assert majority(tie, "g", {"a": -0.5, "b": -1.0}) == "a"
    assert majority(["b", "a", "a", "b"], "g", {}) == "b"  # equally probable: the first drawn
    assert majority(["g"] * 5, "g", {"g": -9.0, "x": 0.0}) == "g"
    assert majority(["x"], "g", {"g": 0.0}) == "x"


def test_the_name_says_how_many_samples():
    assert (samples_of("compute"), samples_of("compute@4"), samples_of("compute@12")) == (DEFAULT_SAMPLES, 4, 12)
    assert samples_of("human") is samples_of("computer") is samples_of("smollm2") is None
    for bad in ("compute@", "compute@0", "compute@x", "compute@-2"):
        with pytest.raises(ValueError, match="compute@K with K a whole number >= 1"):
            samples_of(bad)


def test_it_runs_on_the_base_agents_model_and_prompt_cache(plain):
    base = plain.agent()
    agent = SelfConsistencyAgent(base.policy, 4)
    assert agent.decoder.model is base.policy.constrained.model and agent.decoder.cache is base.policy.constrained.cache
    assert agent.decoder.samples == 4 and agent.decoder.vote
    first_turns(plain, base, range(3))
    before = agent.decoder.cache.prefilled_tokens
    first_turns(plain, agent, range(3))  # the same first prompts: the base agent's prefill serves
    assert agent.decoder.cache.prefilled_tokens - before < 0.1 * before


def test_the_vote_is_the_majority_of_draws_from_the_models_own_log_probabilities(plain):
    """Yes/no-worded questions offer one function and two lines: the draws can be replayed by hand."""
    base = plain.agent()
    agent = SelfConsistencyAgent(base.policy, K, seed=3)
    model, tokenizer = base.policy.model, base.policy.tokenizer
    lines = {a: tokenizer(f"{fn.PREDICT_ANSWER} {a}\n", add_special_tokens=False)["input_ids"] for a in ("yes", "no")}
    episodes = plain.episodes(range(9), 0, 2)
    observations = [e.observe() for e in episodes]
    prompts = [e.executor.prompt_ids() for e in episodes]
    decisions = decide(episodes, [agent] * len(episodes), 0)
    checked, changed, ties = 0, 0, 0
    for observation, prompt, decision, choice in zip(observations, prompts, decisions, agent.last_choices):
        if not is_yes_no_question(fn.current_question(observation.state_text)):
            continue
        keyed = decision_observation(observation, 0)
        rng = np.random.default_rng(agent.seed_of(keyed))
        brute = [_logprob(model, prompt, lines[a]) for a in ("yes", "no")]
        draw(rng, [0.0], K)  # k functions from one candidate, then one line each
        drawn = [answer_key(f"{fn.PREDICT_ANSWER} {('yes', 'no')[draw(rng, brute, 1)[0]]}") for _ in range(K)]
        greedy = answer_key(f"{fn.PREDICT_ANSWER} {'yes' if brute[0] >= brute[1] else 'no'}")
        won = majority(drawn, greedy, {})
        assert choice["vote"] == {"greedy": greedy, "turn": won, "count": drawn.count(won), "samples": K}
        assert decision.actions[-1].text.strip().lower() == won
        checked, changed, ties = checked + 1, changed + (won != greedy), ties + (drawn.count(greedy) == K // 2)
    assert checked >= 4 and changed >= 1 and ties >= 1  # the vote moved a turn, and a tie kept one


def decision_observation(observation, run_seed: int):
    """``observation`` as the episode loop hands it at its first tool round (``agile.rollout.decision_seed``)."""
    return replace(observation, seed=decision_seed(run_seed, observation.episode_id, observation.step))


def test_deterministic_given_the_decisions_seed(plain):
    base = plain.agent()
    one = first_turns(plain, SelfConsistencyAgent(base.policy, K), range(8), seed=0)
    # A fresh agent, the decisions in other batches and after other calls: the same turns.
    again = SelfConsistencyAgent(base.policy, K)
    first_turns(plain, again, range(8, 12), seed=5)
    later = first_turns(plain, again, range(6, 8), seed=0) | first_turns(plain, again, range(6), seed=0)
    assert later == one
    other = first_turns(plain, SelfConsistencyAgent(base.policy, K), range(8), seed=1)
    assert other != one  # another run's decisions draw other samples
    greedy = first_turns(plain, base, range(8))
    assert sum(one[e] != greedy[e] for e in one) >= 1  # the tiny model is unsure: the vote moves some turns


def test_where_every_sample_is_the_greedy_turn_it_plays_the_greedy_turn():
    """A yes/no-worded question offers [PredictAnswer] alone, and a yes line pushed far below leaves "no" certain:
    all k samples are the greedy turn."""
    src = source(yes_no_threshold=1e4)
    base = src.agent()
    agent = SelfConsistencyAgent(base.policy, K)
    episodes = src.episodes(range(9), 0, 2)
    questions = [fn.current_question(e.observe().state_text) for e in episodes]
    voted = first_turns(src, agent, range(9))
    greedy = first_turns(src, base, range(9))
    certain = [c for c, q in zip(agent.last_choices, questions) if is_yes_no_question(q)]
    assert len(certain) >= 4
    assert all(c["vote"]["count"] == K and c["vote"]["turn"] == c["vote"]["greedy"] for c in certain)
    for episode, question in zip(episodes, questions):
        if is_yes_no_question(question):
            assert voted[episode.episode_id] == greedy[episode.episode_id]
            assert answer_key(src.agent().policy.tokenizer.decode(voted[episode.episode_id])).endswith(" no")


def test_it_needs_constrained_decoding():
    src = AgileSource(SLICE, "train", model="tiny", decoding="free", memory="lexical", max_new_tokens=6)
    with pytest.raises(ValueError, match="run the base agent with --decoding constrained"):
        SelfConsistencyAgent(src.policy, 4)


@torch.no_grad()
def _logprob(model, prompt, continuation):
    log_probs = torch.log_softmax(model(input_ids=torch.tensor([prompt + continuation])).logits[0].float(), -1)
    return float(sum(log_probs[len(prompt) - 1 + j, t] for j, t in enumerate(continuation)))


def test_lines_spelled_alike_are_one_turn_with_their_probabilities_summed():
    """The free line "Yes" and the line "yes" gather their votes and their mass; the turn is written as the more
    probable of them; a search counts as one turn."""
    functions = [fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER]
    lines = {("yesno", "yes"): [1], ("yesno", "no"): [2], ("free", ""): [3]}
    keys = ["[predictanswer] yes", "[predictanswer] no", "[predictanswer] yes"]
    options = _turn_options(functions, np.log([0.25, 0.75]), (lines, list(np.log([0.2, 0.5, 0.3]))), keys)
    assert options.keys() == {"search", "[predictanswer] yes", "[predictanswer] no"}
    assert options["search"][1:] == (fn.SEARCH_PRODUCT, None) and math.isclose(options["search"][0], math.log(0.25))
    assert options["[predictanswer] yes"][1:] == (fn.PREDICT_ANSWER, 2)  # the free line: 0.3 beats 0.2
    assert math.isclose(options["[predictanswer] yes"][0], math.log(0.75 * 0.5))
    assert math.isclose(options["[predictanswer] no"][0], math.log(0.75 * 0.5))
    # A tie between the two, the greedy turn being neither: the more probable wins, as majority is told.
    assert majority(["search", "[predictanswer] no", "[predictanswer] no", "search"], "x",
                    {k: v[0] for k, v in options.items()}) == "[predictanswer] no"
