"""ProductQA's LLM base agent: ``AgileAgent`` over the constrained ``LLMPolicy``, on tiny random-initialised
models with the real SmolLM2 tokenizer (no mocks) and the bundled ProductQA slice.

Batching changes no byte of a turn, every turn is a call the executor allows, yes/no-worded questions get
yes or no, and the greedy memo answers a replayed session without the model.
"""

from __future__ import annotations

import functools

import pytest
from productqa_slice import SLICE

from agile.envs.phrasing import is_yes_no_question
from agile import functions as fn
from agile.executor.episode import AgileAgent, AgileSource
from agile.executor.policy import LLMPolicy
from agile.models import load_causal_lm
from agile.protocol import BASE
from agile.rollout import run_episodes
from helper.data.environment import EnvSetup, EnvSpec


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def source():
    return AgileSource(SLICE, "train", model=None, memory="lexical")  # the episodes; the agent comes apart


@functools.cache
def tiny(seed: int):
    return load_causal_lm("tiny", device="cpu", seed=seed)


def agent(seed: int = 1, **kwargs) -> AgileAgent:
    # On this slice seed 1 searches the questions not worded yes/no, seed 0 answers them.
    model, tokenizer = tiny(seed)
    return AgileAgent(LLMPolicy(model, tokenizer, max_new_tokens=6, greedy=True, decoding="constrained", **kwargs))


def test_batched_turns_equal_one_at_a_time_and_are_calls_the_executor_allows(source):
    batched, alone = agent(), agent()
    episodes = source.episodes(range(6), 0, 3)
    functions = set()
    while live := [e for e in episodes if not e.done]:
        clones = [e.clone() for e in live]
        together = batched.act([e.observe() for e in live], episodes=live)
        # One at a time, in reverse order: another prompt-cache history, the same turns.
        single = [alone.act([c.observe()], episodes=[c])[0] for c in reversed(clones)][::-1]
        for episode, action, other in zip(live, together, single):
            assert (action.text, action.token_ids) == (other.text, other.token_ids)
            assert action.signals.keys() == other.signals.keys()
            assert action.signals == pytest.approx(other.signals, abs=1e-5)
            executor = episode.executor
            call = fn.parse_call(action.text)
            assert call is not None and call.name in executor.allowed(), action.text
            assert action.actor == BASE and executor.tokenizer.decode(action.token_ids) == action.text
            if is_yes_no_question(executor.question.question):
                assert call.name == fn.PREDICT_ANSWER and call.argument in ("yes", "no"), action.text
            if call.name == fn.SEARCH_PRODUCT:
                assert action.text.startswith(f"{fn.SEARCH_PRODUCT} SELECT product_id FROM `{executor.group.name}`")
            functions.add(call.name)
            assert episode.step(action).info.get("tool") is None  # every turn is taken (no error line)
    assert functions == {fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER}  # both forms ran through the batch


def test_yes_no_question_heuristic():
    assert is_yes_no_question("Does this backpack have a hip belt?")
    assert is_yes_no_question("I hate smears. Are these any better?")
    assert not is_yes_no_question("How long does the battery last?")


def test_greedy_memo_replays_a_session_without_the_model(source):
    memo = agent(memo=True)
    cache = memo.policy.constrained.cache

    def play(agent_):
        records = run_episodes(source.episodes(range(4), 0, 3), agent_, budget=0)
        return [(r.action_text, r.proposal_signals) for rows in records for r in rows]

    first = play(memo)
    prefilled, turns = cache.prefilled_tokens, len(memo.policy.constrained.choices)
    assert memo.policy.memo_hits == 0 and prefilled > 0
    assert play(memo) == first
    assert memo.policy.memo_hits == turns and cache.prefilled_tokens == prefilled  # no model call
    plain = agent()
    assert play(plain) == first and plain.policy.memo_hits == 0


def test_env_setup_builds_this_agent():
    spec = EnvSpec(env="productqa", agent="tiny", data=str(SLICE), questions_per_episode=2, memory="lexical",
                   max_new_tokens=6)
    base = EnvSetup(spec, "train", groups=["blades"]).base_agent()
    assert isinstance(base, AgileAgent) and base.actor == BASE
    policy = base.policy
    assert policy.decoding == "constrained" and policy.constrained.samples == 0 and policy._memo is not None
    with pytest.raises(ValueError, match="memo=True needs greedy=True"):
        LLMPolicy(policy.model, policy.tokenizer, greedy=False, memo=True)
