"""The executor runs AGILE's function tokens on real ProductQA data (blades group)."""

from __future__ import annotations

import pytest

from agile.envs.product_db import ProductDB
from agile.envs.productqa import load_group
from agile import functions as fn
from agile.executor.executor import Executor, ExecutorConfig
from agile.executor.memory import Embedder, Memory
from agile.models import load_tokenizer

from productqa_slice import SLICE

ROOT = SLICE  # the bundled ProductQA slice, so these run on a fresh clone


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def group():
    return load_group(ROOT / "train" / "blades")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny")


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def first(group, qtype, n=1):
    return group.by_type(qtype)[:n]


def make(group, questions, tokenizer, embedder, **kw):
    gate = kw.pop("gate", None)
    return Executor(group, questions, tokenizer, Memory(embedder), ExecutorConfig(**kw), gate=gate)


def test_parse_call():
    assert fn.parse_call("[SearchProduct] SELECT 1\nrest") == fn.FunctionCall(fn.SEARCH_PRODUCT, "SELECT 1")
    assert fn.parse_call("  [SeekAdvice]\n") == fn.FunctionCall(fn.SEEK_ADVICE, "")
    assert fn.parse_call("[Bogus] x") is None
    assert fn.parse_call("answer: yes") is None
    assert fn.format_call(fn.PREDICT_ANSWER, "yes\nno") == "[PredictAnswer] yes no\n"
    with pytest.raises(ValueError, match="unknown function"):
        fn.format_call("[Nope]")


def test_session_start_runs_get_question_and_retrieve_memory(group, tokenizer, embedder):
    q = first(group, "fact_qa")[0]
    ex = make(group, [q], tokenizer, embedder)
    text = ex.context_text()
    assert f"{fn.GET_QUESTION} {q.question}" in text
    assert f"{fn.RETRIEVE_MEMORY}\nKnowledge: none\nHistory: none" in text
    assert ex.allowed() == (fn.SEEK_ADVICE, fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER)
    assert ex.prompt_ids() == sum((s.ids for s in ex.segments), [])


def test_restate_question_adds_only_the_question_again_and_keeps_the_session_going(group, tokenizer, embedder):
    from agile.executor.executor import QUESTION_AGAIN

    q1, q2 = first(group, "fact_qa", 2)
    plain = make(group, [q1, q2], tokenizer, embedder)
    ex = make(group, [q1, q2], tokenizer, embedder, restate_question=True)
    # The context as AGILE orders it, then the question again as its last line.
    assert ex.context_text() == plain.context_text() + f"{QUESTION_AGAIN} {' '.join(q1.question.split())}\n"
    assert ex.observation.features == plain.observation.features  # retrieved_tokens counts the memory alone
    assert ex.prompt_ids() == sum((s.ids for s in ex.segments), [])
    ex.act(fn.format_call(fn.PREDICT_ANSWER, "yes"))
    assert ex.session == 1 and ex.context_text().endswith(f"{QUESTION_AGAIN} {' '.join(q2.question.split())}\n")
    # The session still opens with [GetQuestion]: what the decoder and the PRM read the question from.
    assert ex.context_text().rsplit(fn.GET_QUESTION, 1)[-1].startswith(f" {' '.join(q2.question.split())}\n")
    # With neither the row nor the memory after it, the question is already last: nothing is repeated.
    bare = make(group, [q1], tokenizer, embedder, restate_question=True, show_product=False, use_memory=False)
    assert QUESTION_AGAIN not in bare.context_text()


def test_a_gate_run_can_show_the_agent_the_context_it_reads_when_it_chooses_itself(group, tokenizer, embedder):
    from helper.gates.simple import NeverGate

    q1, q2 = first(group, "fact_qa", 2)
    own = make(group, [q1, q2], tokenizer, embedder, advice_cost=0.8, restate_question=True)
    gated = make(group, [q1, q2], tokenizer, embedder, advice_cost=0.8, restate_question=True, gate=NeverGate())
    listed = make(group, [q1, q2], tokenizer, embedder, advice_cost=0.8, restate_question=True, gate=NeverGate(),
                  list_advice_with_gate=True)
    line = f"{fn.SEEK_ADVICE} (ask a human expert; costs 0.8)"
    assert line in own.context_text() and line not in gated.context_text()
    # Listed, the agent's prompt is token for token the one it reads choosing itself; it still may not call it.
    assert listed.prompt_ids() == own.prompt_ids() and fn.SEEK_ADVICE not in listed.allowed()
    assert fn.SEEK_ADVICE in own.allowed()
    for ex in (own, listed):
        ex.act(fn.format_call(fn.PREDICT_ANSWER, "yes"))
    assert listed.prompt_ids() == own.prompt_ids() and listed.session == 1


def test_search_product_executes_sql_on_the_table(group, tokenizer, embedder):
    q = next(q for q in group.by_type("search_qa") if q.short_answer)
    ex = make(group, [q], tokenizer, embedder)
    ex.act(fn.format_call(fn.SEARCH_PRODUCT, q.gold_sql))
    (record,) = ex.records
    expected = ProductDB(group).query(q.gold_sql)
    assert record.answer == expected and record.correct and record.reward == 1.0
    assert f"{fn.SEARCH_RESULT} {', '.join(expected)}" in ex.context_text()
    assert record.functions[-2:] == [fn.SEARCH_PRODUCT, fn.SUBMIT_ANSWER]
    assert ex.done


def test_bad_sql_shows_the_error_and_gives_up_after_max_turns(group, tokenizer, embedder):
    q = first(group, "search_qa")[0]
    ex = make(group, [q], tokenizer, embedder, max_turns=2)
    ex.act("[SearchProduct] SELECT nope FROM `blades`")
    assert not ex.done and "no such column: nope" in ex.context_text()
    ex.act("gibberish")
    (record,) = ex.records
    assert not record.correct and record.answer is None and record.turns == 2


def test_action_mask_marks_exactly_the_llm_tokens(group, tokenizer, embedder):
    q = first(group, "fact_qa")[0]
    ex = make(group, [q], tokenizer, embedder, max_turns=3)
    ex.act("I think yes")  # not a function: an error line, then a retry
    assert f"{fn.ERROR} expected one of" in ex.context_text()
    ex.act(f"[PredictAnswer] {q.short_answer}")
    (record,) = ex.records
    actions = [i for i, m in zip(record.input_ids, record.action_mask) if m]
    assert tokenizer.decode(actions) == f"I think yes\n[PredictAnswer] {q.short_answer}\n"
    assert record.correct and record.reward == 1.0


def test_seek_advice_costs_c_and_reflection_is_stored(group, tokenizer, embedder):
    q1, q2 = first(group, "reasoning_qa", 2)
    ex = make(group, [q1, q2], tokenizer, embedder, advice_cost=0.3)
    ex.act("[SeekAdvice]")
    assert f"{fn.ADVICE} {' '.join(q1.long_answer.split())}" in ex.context_text()
    assert ex.allowed() == (fn.REFLECTION,)
    knowledge = q1.extra_data["knowledge"]
    ex.act(f"[Reflection] {knowledge}")
    record = ex.records[0]
    assert record.advised and record.correct and record.reward == pytest.approx(0.7)
    assert record.reflection_stored and ex.memory.has_knowledge(knowledge)
    assert fn.UPDATE_MEMORY in record.functions
    # The QA pair is filed under its product, the knowledge under the group.
    kinds = sorted(e.kind for e in ex.memory.entries)
    assert kinds == ["knowledge", "qa"]
    # The next session retrieves the stored knowledge.
    assert f"Knowledge: {' '.join(knowledge.split())}" in ex.context_text()


def test_no_information_reflection_is_not_stored(group, tokenizer, embedder):
    q = first(group, "fact_qa")[0]
    ex = make(group, [q], tokenizer, embedder)
    ex.act("[SeekAdvice]")
    ex.act("[Reflection] No information.")
    record = ex.records[0]
    assert record.advised and not record.reflection_stored
    assert [e.kind for e in ex.memory.entries] == ["qa"]  # only the QA pair


def test_context_is_cleared_between_sessions_unless_kept(group, tokenizer, embedder):
    q1, q2 = first(group, "fact_qa", 2)
    ex = make(group, [q1, q2], tokenizer, embedder, keep_sessions=0)
    ex.act("[PredictAnswer] yes")
    assert q1.question not in ex.context_text() and q2.question in ex.context_text()
    assert fn.CLEAR_CONTEXT in ex._functions
    kept = make(group, [q1, q2], tokenizer, embedder, keep_sessions=1)
    kept.act("[PredictAnswer] yes")
    assert q1.question in kept.context_text() and q2.question in kept.context_text()
    # Over the token limit, the oldest session goes first.
    small = make(group, [q1, q2], tokenizer, embedder, keep_sessions=1, max_context_tokens=10)
    small.act("[PredictAnswer] yes")
    assert q1.question not in small.context_text() and q2.question in small.context_text()


def test_ablations_remove_functions(group, tokenizer, embedder):
    q = first(group, "fact_qa")[0]
    ex = make(group, [q], tokenizer, embedder, use_memory=False, use_tools=False, use_advice=False)
    assert ex.allowed() == (fn.PREDICT_ANSWER,)
    assert fn.RETRIEVE_MEMORY not in ex.context_text()
    assert fn.SEEK_ADVICE not in ex.context_text() and fn.SEARCH_PRODUCT not in ex.context_text()
    ex.act("[SeekAdvice]")  # not offered: an error, not advice
    assert not ex.done and "expected one of [PredictAnswer]" in ex.context_text()


class AlwaysGate:
    def __init__(self):
        self.calls = []

    def should_intervene(self, observation, budget_left):
        self.calls.append((observation.task_id, budget_left))
        return budget_left > 0


def test_gate_replaces_seek_advice_within_budget(group, tokenizer, embedder):
    q1, q2 = first(group, "fact_qa", 2)
    gate = AlwaysGate()
    ex = make(group, [q1, q2], tokenizer, embedder, gate=gate, budget=1)
    assert ex.allowed() == (fn.REFLECTION,)  # the gate already sought advice
    assert fn.SEEK_ADVICE not in ex.allowed()
    ex.act("[Reflection] no information")
    assert ex.records[0].advised and ex.records[0].by_gate
    assert ex.allowed() == (fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER)  # budget spent
    ex.act("[PredictAnswer] yes")
    assert [c[1] for c in gate.calls] == [1]  # with no budget left the gate is not asked
    assert not ex.records[1].advised
    assert ex.observation.env == "productqa" and ex.observation.annotations["question_type"] == "fact_qa"
    assert not any(k.startswith("type_") for k in ex.observation.features)  # not a feature by default
    gold = make(group, [q1, q2], tokenizer, embedder, gold_features=True)
    assert gold.observation.features["type_fact_qa"] == 1.0
    assert gold.observation.annotations == ex.observation.annotations


@pytest.mark.parametrize("budget, advised", [(None, 4), (0, 0), (2, 2)])
def test_the_gate_advises_within_the_episode_budget(group, tokenizer, embedder, budget, advised):
    """budget None: no limit, every question the gate wants is advised; k: at most k, counted by the
    one counting object of the loop and the gates (agile.budget.EpisodeBudget)."""
    from agile.budget import EpisodeBudget

    questions = first(group, "fact_qa", 4)
    ex = make(group, questions, tokenizer, embedder, gate=AlwaysGate(), budget=budget, use_reflection=False)
    assert isinstance(ex.advice, EpisodeBudget)
    while not ex.done:
        ex.act("[PredictAnswer] yes")
    assert sum(r.advised for r in ex.records) == advised == ex.advice_used
    twin = make(group, questions, tokenizer, embedder, gate=AlwaysGate(), budget=1, use_reflection=False)
    clone = twin.clone()  # a clone counts its own advice (a proposal played on a copy spends nothing)
    assert (clone.advice_used, twin.advice_used) == (1, 1) and clone.advice is not twin.advice
    with pytest.raises(RuntimeError, match="past the budget of 1"):
        twin.seek_advice()  # the loop asking past the budget: refused, not counted


def test_clone_is_independent(group, tokenizer, embedder):
    q1, q2 = first(group, "reasoning_qa", 2)
    ex = make(group, [q1, q2], tokenizer, embedder)
    twin = ex.clone()
    twin.act("[SeekAdvice]")
    twin.act(f"[Reflection] {q1.extra_data['knowledge']}")
    assert len(twin.memory) == 2 and len(ex.memory) == 0
    assert len(twin.records) == 1 and not ex.records
    ex.act("[PredictAnswer] no")
    assert not ex.records[0].advised and twin.records[0].advised


def test_resume_runs_sessions_one_at_a_time(group, tokenizer, embedder):
    qs = first(group, "fact_qa", 3)
    ex = Executor(group, qs, tokenizer, Memory(embedder), ExecutorConfig(), end=0)
    assert ex.done
    ex.resume(1)
    ex.act("[PredictAnswer] yes")
    assert ex.done and len(ex.records) == 1
    ex.resume(3)
    assert ex.question is qs[1]


def test_a_turn_is_the_first_non_empty_line(tokenizer):
    from agile.executor.policy import TurnEnd

    end = TurnEnd(tokenizer)
    ids = tokenizer("\n\n[PredictAnswer] yes\n[SeekAdvice]\n", add_special_tokens=False).input_ids
    turn = ids[:end.cut(ids)]
    assert tokenizer.decode(turn) == "\n\n[PredictAnswer] yes\n"
    assert fn.parse_call(tokenizer.decode(turn)) == fn.FunctionCall(fn.PREDICT_ANSWER, "yes")
    assert end.cut([tokenizer.eos_token_id, 5]) == 1
    no_end = tokenizer("[SeekAdvice]", add_special_tokens=False).input_ids
    assert end.cut(no_end) == len(no_end)


def test_greedy_memo_answers_a_prompt_met_before_with_the_same_turn(tokenizer):
    from agile.executor.policy import LLMPolicy
    from agile.models import load_causal_lm

    model, _ = load_causal_lm("tiny")
    prompts = [tokenizer(text, add_special_tokens=False).input_ids
               for text in ("Q: is it sharp?\n", "Q: which blade fits a 10 inch saw?\n")]
    plain = LLMPolicy(model, tokenizer, max_new_tokens=5, greedy=True, batch_size=1)
    memo = LLMPolicy(model, tokenizer, max_new_tokens=5, greedy=True, batch_size=1, memo=True)
    expected = [plain.generate([p])[0] for p in prompts]
    assert memo.generate([prompts[0], prompts[1], prompts[0]]) == expected + expected[:1]
    assert memo.memo_hits == 1 and memo.generated_tokens == sum(map(len, expected))  # the repeat was not generated
    turns = memo.generate(prompts[::-1])
    assert turns == expected[::-1] and memo.memo_hits == 3
    turns[0].append(0)  # a caller extending its turn does not change what the memo answers next
    assert memo.generate(prompts[1:]) == expected[1:]
    with pytest.raises(ValueError, match="greedy"):
        LLMPolicy(model, tokenizer, greedy=False, memo=True)
