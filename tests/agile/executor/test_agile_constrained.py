"""The AGILE policy's constrained decoding on tiny random-initialised models (generated catalog):
golden turns on fixed seeds, its log-probabilities against brute force, and no annotation read."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agile.agents.prompt_cache import PromptKVCache, score_continuations
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.sessions import SplitSessions
from agile.envs.phrasing import is_yes_no_question
from agile import functions as fn
from agile.executor.constrained import ConstrainedDecoder
from agile.executor.episode import ExternalAdvice
from agile.executor.executor import Executor
from agile.executor.memory import Embedder, Memory
from agile.executor.policy import LLMPolicy, run_executors
from agile.executor.sql_grammar import SQLGrammar
from agile.models import load_causal_lm


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def sessions():
    return SplitSessions(default_catalog_dir(seed=0), "train")


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def executors(sessions, tokenizer, embedder, n=3, questions=3, scrub=False, **kw):
    out = []
    for i in range(n):
        group, qs = sessions.window(i, 0, questions)
        if scrub:  # what a deployed agent has: no type, no gold answer or SQL, no typed id
            qs = [dataclasses.replace(q, id=f"q{j}", type="unknown", short_answer="", long_answer="",
                                      extra_data=None, answer_titles=()) for j, q in enumerate(qs)]
        out.append(Executor(group, qs, tokenizer, Memory(embedder), episode_id=f"e{i}", **kw))
    return out


def play(seed, sessions, embedder, **kw):
    model, tokenizer = load_causal_lm("tiny", seed=seed)
    policy = LLMPolicy(model, tokenizer, max_new_tokens=6, greedy=True, decoding="constrained")
    runs = executors(sessions, tokenizer, embedder, **kw)
    run_executors(runs, policy)
    return runs, policy


def turns(runs):
    return [(r.group, r.functions[-2] if r.functions[-1] == fn.SUBMIT_ANSWER else r.functions[-1], r.answer)
            for e in runs for r in e.records]


# Golden: (group, the LLM's last function, the submitted answer) of every session.
GOLDEN = {
    0: [("gen_backpacks", "[PredictAnswer]", "yes")] * 3 + [("gen_blenders", "[PredictAnswer]", "yes")] * 3
       + [("gen_desk_lamps", "[PredictAnswer]", "yes")] * 3,
    2: [("gen_backpacks", "[PredictAnswer]", "no")] * 3 + [("gen_blenders", "[PredictAnswer]", "no")] * 3
       + [("gen_desk_lamps", "[PredictAnswer]", "no")] * 3,
}


@pytest.mark.parametrize("seed", sorted(GOLDEN))
def test_golden_answers_on_fixed_seeds(seed, sessions, embedder):
    runs, policy = play(seed, sessions, embedder)
    assert turns(runs) == GOLDEN[seed]
    assert {(c["function"], c["form"]) for c in policy.constrained.choices} == {("[PredictAnswer]", "yesno")}


def test_golden_query_is_built_in_the_tables_grammar_and_runs(sessions, embedder):
    model, tokenizer = load_causal_lm("tiny", seed=1)
    policy = LLMPolicy(model, tokenizer, max_new_tokens=6, greedy=True, decoding="constrained")
    group, questions = sessions.window(2, 0, 1)  # "What is the color temperature of this lamp?": not yes/no
    executor = Executor(group, questions, tokenizer, Memory(embedder), episode_id="e")
    run_executors([executor], policy)
    action_turns = [s.text for s in executor.segments if s.action]
    query = "SELECT product_id FROM `gen_desk_lamps` WHERE brand = 'BenQ';"
    assert action_turns == [f"[SearchProduct] {query}\n"]  # one turn: a grammar's query always runs
    assert executor.records[0].answer == executor.db.query(query, limit=executor.config.max_search_results) != []
    assert [c["form"] for c in policy.constrained.choices] == ["sql"]


def test_each_query_unit_is_the_argmax_of_brute_force_log_probabilities(sessions, embedder):
    """Column, value and ending: each the most probable of the grammar's choices after what came before."""
    model, tokenizer = load_causal_lm("tiny", seed=1)
    group, questions = sessions.window(2, 0, 1)
    executor = Executor(group, questions, tokenizer, Memory(embedder), episode_id="e")
    grammar = SQLGrammar.of(executor.db)
    decoder = ConstrainedDecoder(model, tokenizer)
    prompt = executor.prompt_ids()
    ids = decoder.run_alone(decoder._grammar_sql(prompt, grammar))
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    written = encode(f"{fn.SEARCH_PRODUCT} {grammar.prefix()}")

    def best(units):
        return max(units, key=lambda u: _logprob(model, prompt + written, encode(u)))

    unit = best(grammar.columns(set()))
    written += encode(unit)
    written += encode(best(grammar.values(grammar.name_of(unit))))
    nxt = best(grammar.endings() + [" AND"])
    assert nxt != " AND"  # this model ends after one condition (the golden query above)
    assert ids == written + encode(nxt) + ([] if nxt.endswith("\n") else [decoder.newline_id])


def test_yes_no_questions_are_answered_yes_or_no_and_never_searched(sessions, embedder):
    """The wording restricts the forms: a search answers with product ids, which cannot answer yes/no."""
    model, tokenizer = load_causal_lm("tiny", seed=1)  # the seed that searches the lamp question above
    policy = LLMPolicy(model, tokenizer, max_new_tokens=6, greedy=True, decoding="constrained")
    runs = executors(sessions, tokenizer, embedder, n=6, questions=4)
    run_executors(runs, policy)
    by_wording = {}
    for choice in policy.constrained.choices:
        by_wording.setdefault(choice["yes_no_question"], []).append(choice)
    assert {(c["function"], c["form"]) for c in by_wording[True]} == {("[PredictAnswer]", "yesno")}
    assert all(fn.SEARCH_PRODUCT not in c["function_logprobs"] for c in by_wording[True])
    assert {c["function"] for c in by_wording[False]} >= {fn.SEARCH_PRODUCT}
    # One turn per yes/no question: the wording was read off the context, question by question.
    assert len(by_wording[True]) == sum(is_yes_no_question(q.question) for e in runs for q in e.questions) > 0


def test_reflection_after_advice_is_the_models_line(sessions, embedder):
    model, tokenizer = load_causal_lm("tiny", seed=0)
    policy = LLMPolicy(model, tokenizer, max_new_tokens=4, greedy=True, decoding="constrained")
    (executor,) = executors(sessions, tokenizer, embedder, n=1, questions=1, gate=ExternalAdvice())
    executor.seek_advice()
    assert executor.allowed() == (fn.REFLECTION,)
    run_executors([executor], policy)
    (turn,) = [s.text for s in executor.segments if s.action]
    assert turn.startswith(fn.REFLECTION) and turn.endswith("\n") and executor.records[0].advised
    assert policy.constrained.choices[-1]["form"] == "free"


def test_choices_are_the_argmax_of_brute_force_log_probabilities(sessions, embedder):
    model, tokenizer = load_causal_lm("tiny", seed=3)
    policy = LLMPolicy(model, tokenizer, max_new_tokens=5, greedy=True, decoding="constrained")
    runs = executors(sessions, tokenizer, embedder, n=2, questions=2)
    checked = answers = 0
    while not all(e.done for e in runs):
        active = [e for e in runs if not e.done]
        prompts = [(e.prompt_ids(), e.allowed()) for e in active]
        for executor, ids, (prompt, allowed) in zip(active, policy(active), prompts):
            choice = policy.constrained.choices[-len(active) + active.index(executor)]
            offered = [a for a in allowed if not (choice["yes_no_question"] and a == fn.SEARCH_PRODUCT)]
            brute = {name: _logprob(model, prompt, tokenizer(name, add_special_tokens=False)["input_ids"])
                     for name in offered}
            assert choice["function_logprobs"] == pytest.approx(brute, abs=1e-3)
            assert choice["function"] == max(brute, key=brute.get)
            assert tokenizer.decode(ids).startswith(choice["function"]) and ids[-1] in policy.constrained.newlines
            # The turn's signals: margins of the same log-probabilities, absent where nothing competed.
            signals = policy.last_signals[active.index(executor)]
            ranked = sorted(brute.values(), reverse=True)
            if len(ranked) > 1:
                assert signals["function_margin"] == pytest.approx(ranked[0] - ranked[1], abs=1e-3)
            else:
                assert "function_margin" not in signals
            if choice["function"] == fn.PREDICT_ANSWER:
                chosen = _logprob(model, prompt, ids)
                assert signals["answer_logprob"] == pytest.approx(chosen / len(ids), abs=1e-3)
                assert signals["answer_margin"] >= 0
                answers += 1
            else:
                assert "answer_margin" not in signals
            checked += 1
            executor.act(ids)
    assert checked == 4 and answers >= 1


def test_score_continuations_equals_a_full_forward_pass():
    model, tokenizer = load_causal_lm("tiny", seed=0)
    prompt = tokenizer("Is the kettle cordless?\n", add_special_tokens=False)["input_ids"]
    lines = [tokenizer(t, add_special_tokens=False)["input_ids"]
             for t in ("[PredictAnswer] yes\n", "[SearchProduct]", "[PredictAnswer] a long free answer\n")]
    logits, kv = PromptKVCache(model).prefill(prompt)
    assert score_continuations(model, logits, kv, lines) == pytest.approx(
        [_logprob(model, prompt, line) for line in lines], abs=1e-4)


def test_no_annotation_is_read(sessions, embedder):
    """Executors whose questions carry no type, gold answer, gold SQL or typed id get the same turns."""
    for seed in (0, 1):
        seen, _ = play(seed, sessions, embedder, n=2, questions=2)
        blind, _ = play(seed, sessions, embedder, n=2, questions=2, scrub=True)
        assert [[s.ids for s in e.segments if s.action] for e in seen] == \
            [[s.ids for s in e.segments if s.action] for e in blind]


def test_sampled_constrained_decoding_is_never_memoised():
    model, tokenizer = load_causal_lm("tiny", seed=0)
    with pytest.raises(ValueError, match="memo=True needs greedy"):
        LLMPolicy(model, tokenizer, greedy=False, decoding="constrained", memo=True)
    with pytest.raises(ValueError, match="decoding"):
        LLMPolicy(model, tokenizer, greedy=True, decoding="beam")


@torch.no_grad()
def _logprob(model, prompt, continuation):
    ids = torch.tensor([prompt + continuation], device=model.device)
    log_probs = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return float(sum(log_probs[len(prompt) - 1 + j, t] for j, t in enumerate(continuation)))


def test_yes_no_threshold_answers_yes_exactly_above_it(sessions, embedder):
    """``ExecutorConfig.yes_no_threshold``: each first yes/no answer is "yes" iff the model's yes-minus-no
    log-odds (read with no threshold) exceed the threshold; the median splits the answers both ways."""
    from agile.executor.executor import ExecutorConfig

    model, tokenizer = load_causal_lm("tiny", seed=1)

    def first_answers(threshold):
        policy = LLMPolicy(model, tokenizer, max_new_tokens=6, greedy=True, decoding="constrained")
        policy.constrained.ask_shift = -1e4  # listed, never asked: every question is answered
        runs = executors(sessions, tokenizer, embedder, n=12, questions=1,
                         config=ExecutorConfig(yes_no_threshold=threshold))
        run_executors(runs, policy)
        first_round = policy.constrained.choices[:len(runs)]  # one choice per executor, in order
        return {e.episode_id: c for e, c in zip(runs, first_round)
                if c["yes_no_question"] and c["function"] == fn.PREDICT_ANSWER}

    plain = first_answers(0.0)
    odds = {k: (1.0 if c["turn"].endswith("yes") else -1.0) * c["signals"]["answer_margin"] for k, c in plain.items()}
    assert len(odds) >= 4
    ranked = sorted(odds.values())
    threshold = (ranked[len(ranked) // 2 - 1] + ranked[len(ranked) // 2]) / 2
    moved = first_answers(threshold)
    assert set(moved) == set(odds)
    said_yes = {k: c["turn"].endswith("yes") for k, c in moved.items()}
    assert said_yes == {k: v > threshold for k, v in odds.items()}
    assert any(said_yes.values()) and not all(said_yes.values())
    # The recorded margin is the shifted one: its sign is the answer given.
    assert all((odds[k] - threshold > 0) == said_yes[k] for k in odds)
    assert all(abs(abs(odds[k] - threshold) - c["signals"]["answer_margin"]) < 1e-4 for k, c in moved.items())
