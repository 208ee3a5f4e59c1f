"""The constrained policy's consistency samples (``agile.executor.consistency``): exact values, brute force
over the model's own log-probabilities, determinism per decision and seed, and what they cost (no turn
changes, no prompt prefilled again). Tiny random-initialised models, the bundled ProductQA slice.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from productqa_slice import SLICE

from agile.envs.phrasing import is_yes_no_question
from agile import functions as fn
from agile.executor.consistency import CONSISTENCY_KEYS, answer_key, consistency_signals, decision_rng, draw
from agile.executor.constrained import ConstrainedDecoder
from agile.executor.episode import AgileSource
from agile.executor.policy import LLMPolicy
from agile.models import load_causal_lm
from agile.rollout import run_episodes
from helper.commands.cli import main as helpgate
from helper.data.environment import EnvSetup, EnvSpec


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def source():
    return AgileSource(SLICE, "train", model=None, memory="lexical")


@functools.cache
def tiny(seed: int):
    # On this slice seed 1 searches the questions not worded yes/no, seed 0 answers them.
    return load_causal_lm("tiny", device="cpu", seed=seed)


def policy(model_seed: int, k: int, seed: int = 0) -> LLMPolicy:
    return LLMPolicy(*tiny(model_seed), max_new_tokens=6, greedy=True, decoding="constrained",
                     consistency_samples=k, consistency_seed=seed)


def executors(source, indices=range(6), questions=3):
    return [e.executor for e in source.episodes(indices, 0, questions)]


def play(policy: LLMPolicy, runs) -> dict:
    """Every decision of ``runs``, keyed by (episode, session, context length): its prompt, question, turn
    and signals."""
    said = {}
    while live := [e for e in runs if not e.done]:
        before = [((e.episode_id, e.session, len(e.segments)), e.prompt_ids(), e.question.question) for e in live]
        turns = policy(live)
        for (key, prompt, question), turn, signals in zip(before, turns, policy.last_signals):
            said[key] = {"prompt": prompt, "question": question, "turn": tuple(turn), "signals": signals}
        for executor, turn in zip(live, turns):
            executor.act(turn)
    return said


def test_consistency_signals_exact_values():
    said = consistency_signals("[PredictAnswer] Yes", ["[PredictAnswer] yes", "[PredictAnswer]  YES\n# note",
                                                       "[PredictAnswer] no"])
    assert said["consistency_agree"] == pytest.approx(2 / 3)
    assert said["consistency_entropy"] == pytest.approx(-(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3))
    same = consistency_signals("a", ["a"] * 5)
    assert same == {"consistency_agree": 1.0, "consistency_entropy": 0.0}
    spread = consistency_signals("z", ["a", "b", "c", "d"])
    assert spread["consistency_agree"] == 0.0 and spread["consistency_entropy"] == pytest.approx(math.log(4))
    assert answer_key("[PredictAnswer]  B0X  Y\nmore") == "[predictanswer] b0x y"


def test_draws_follow_the_softmax_and_are_a_function_of_seed_and_prompt():
    log_probs = np.log([1.0, 2.0, 3.0]) - 40.0  # only differences matter
    frequencies = np.bincount(draw(decision_rng(0, [5, 6, 7]), log_probs, 60_000), minlength=3) / 60_000
    assert np.allclose(frequencies, [1 / 6, 2 / 6, 3 / 6], atol=0.01), frequencies
    first = draw(decision_rng(0, [5, 6, 7]), log_probs, 40)
    assert draw(decision_rng(0, [5, 6, 7]), log_probs, 40) == first
    assert draw(decision_rng(1, [5, 6, 7]), log_probs, 40) != first
    assert draw(decision_rng(0, [5, 6, 8]), log_probs, 40) != first
    assert draw(decision_rng(0, [5, 6, 7]), [-3.0], 5) == [0] * 5  # one candidate: one outcome


def test_samples_are_deterministic_per_decision_and_differ_across_seeds(source):
    one = play(policy(0, 4), executors(source))
    assert play(policy(0, 4), executors(source)) == one
    # A decision's samples depend on neither the executors run before or beside it nor the cache's history.
    later = play(policy(0, 4), executors(source, range(3, 6)))
    assert later.keys() < one.keys()
    for key, said in later.items():
        assert said["turn"] == one[key]["turn"]
        assert {k: said["signals"][k] for k in CONSISTENCY_KEYS} == {k: one[key]["signals"][k] for k in CONSISTENCY_KEYS}
        assert said["signals"] == pytest.approx(one[key]["signals"], abs=1e-5)
    other = play(policy(0, 4, seed=7), executors(source))
    assert [d["turn"] for d in other.values()] == [d["turn"] for d in one.values()]  # the greedy turns stay
    agree = [d["signals"]["consistency_agree"] for d in one.values()]
    assert len(set(agree)) > 1  # the tiny model is far from sure: the samples vary
    assert [d["signals"]["consistency_agree"] for d in other.values()] != agree


def test_one_hot_function_two_way_answer_matches_brute_force(source):
    """Yes/no-worded questions: only [PredictAnswer] is offered, the answer is yes or no."""
    model, tokenizer = tiny(0)
    lines = {a: tokenizer(f"{fn.PREDICT_ANSWER} {a}\n", add_special_tokens=False)["input_ids"] for a in ("yes", "no")}
    exact = play(policy(0, 8), executors(source, range(4), 2))
    many = play(policy(0, 4000), executors(source, range(4), 2))
    checked = 0
    for key, said in exact.items():
        if not is_yes_no_question(said["question"]):
            continue
        brute = np.array([_logprob(model, said["prompt"], lines[a]) for a in ("yes", "no")])
        greedy = tokenizer.decode(said["turn"])
        # The exact draws: k functions from one candidate, then one line per sample.
        rng = decision_rng(0, said["prompt"])
        functions = draw(rng, [0.0], 8)
        drawn = [tokenizer.decode(lines[("yes", "no")[draw(rng, brute, 1)[0]]]) for _ in functions]
        assert {k: said["signals"][k] for k in CONSISTENCY_KEYS} == consistency_signals(greedy, drawn)
        # Their expectation: agreement is the greedy line's probability, entropy the two lines'.
        p = np.exp(brute - brute.max())
        p /= p.sum()
        mine = p[0 if greedy.endswith("yes\n") else 1]
        signals = many[key]["signals"]
        assert signals["consistency_agree"] == pytest.approx(mine, abs=4 * math.sqrt(mine * (1 - mine) / 4000))
        assert signals["consistency_entropy"] == pytest.approx(-(p * np.log(p)).sum(), abs=0.01)
        checked += 1
    assert checked >= 4


def test_two_way_function_matches_brute_force(source):
    """Questions not worded yes/no, where seed 1 searches: agreement is the chance of drawing the search."""
    model, tokenizer = tiny(1)
    names = [tokenizer(name, add_special_tokens=False)["input_ids"] for name in (fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER)]
    exact = play(policy(1, 8), executors(source, range(4), 2))
    many = play(policy(1, 4000), executors(source, range(4), 2))
    checked = 0
    for key, said in exact.items():
        if not tokenizer.decode(said["turn"]).startswith(fn.SEARCH_PRODUCT):
            continue
        brute = np.array([_logprob(model, said["prompt"], ids) for ids in names])
        drawn = draw(decision_rng(0, said["prompt"]), brute, 8)
        assert said["signals"]["consistency_agree"] == drawn.count(0) / 8
        p_search = 1 / (1 + math.exp(brute[1] - brute[0]))
        agree = many[key]["signals"]["consistency_agree"]
        assert agree == pytest.approx(p_search, abs=4 * math.sqrt(p_search * (1 - p_search) / 4000))
        checked += 1
    assert checked >= 2


def test_samples_change_no_turn_and_prefill_no_prompt():
    """Through EnvSetup (seed 0 answers every question): the same rows, and not one more prefilled token."""
    def run(k):
        spec = EnvSpec(env="productqa", agent="tiny", data=str(SLICE), questions_per_episode=3, memory="lexical",
                       max_new_tokens=6, consistency_samples=k)
        setup = EnvSetup(spec, "train", groups=["blades", "litter"], agent_seed=5)
        base = setup.base_agent()
        assert base.policy.constrained.samples == k and base.policy.constrained.seed == 5  # the agent's seed
        records = run_episodes(setup.episodes(range(4), 0), base, budget=1, explore_p=0.3, rng_seed=3,
                               decide_after="proposal")
        return base.policy.constrained.cache, [r for rows in records for r in rows]

    (plain, rows_plain), (sampled, rows_sampled) = run(0), run(8)
    assert [(r.proposal_text, r.action_text) for r in rows_sampled] == [(r.proposal_text, r.action_text)
                                                                         for r in rows_plain]
    assert (sampled.prompts, sampled.prefilled_tokens, sampled.prompt_tokens) == \
        (plain.prompts, plain.prefilled_tokens, plain.prompt_tokens) and plain.prefilled_tokens > 0
    for with_samples, without in zip(rows_sampled, rows_plain):
        assert without.proposal_signals.keys().isdisjoint(CONSISTENCY_KEYS)
        # Equal up to the float noise of forwards batched with other rows (oneDNN's kernels on a CPU with native
        # BF16 order a sum by the batch's shape): the samples add keys, they change no signal.
        assert {k: v for k, v in with_samples.proposal_signals.items() if k not in CONSISTENCY_KEYS} == \
            pytest.approx(without.proposal_signals, abs=1e-4)
        agree, entropy = (with_samples.proposal_signals[k] for k in CONSISTENCY_KEYS)
        assert agree * 8 == int(agree * 8) and 0.0 <= entropy <= math.log(8) + 1e-9
    assert len({r.proposal_signals["consistency_agree"] for r in rows_sampled}) > 1


def test_after_a_search_the_answer_lines_are_scored_once_whatever_k(source):
    """Where the greedy turn searched, the samples need the answer lines: scored from the cached prompt, so
    only the few tokens of ``[PredictAnswer]`` it does not share with the query are prefilled, for any k."""
    tokenizer = tiny(1)[1]
    answer = tokenizer(fn.PREDICT_ANSWER, add_special_tokens=False)["input_ids"]
    caches, decisions = {}, None
    for k in (0, 8, 32):
        p = policy(1, k)
        said = play(p, executors(source, range(4), 2))
        assert decisions is None or [d["turn"] for d in said.values()] == decisions
        decisions, caches[k] = [d["turn"] for d in said.values()], p.constrained.cache
    searched = [t for t in decisions if tokenizer.decode(t).startswith(fn.SEARCH_PRODUCT)]
    shared = [len(_common_prefix(answer, list(t))) for t in searched]
    assert searched and all(0 < n < len(answer) for n in shared)
    for k in (8, 32):
        assert caches[k].prompts == caches[0].prompts + len(searched)
        assert caches[k].prefilled_tokens == caches[0].prefilled_tokens + sum(len(answer) - n for n in shared)
        assert caches[k].prompt_tokens - caches[k].reused_tokens == caches[k].prefilled_tokens


def test_samples_need_constrained_decoding_and_a_count():
    model, tokenizer = tiny(0)
    with pytest.raises(ValueError, match="consistency_samples=2 needs decoding='constrained'"):
        LLMPolicy(model, tokenizer, greedy=True, decoding="free", consistency_samples=2)
    with pytest.raises(ValueError, match="samples must be >= 0"):
        ConstrainedDecoder(model, tokenizer, samples=-1)


@pytest.mark.parametrize("argv, named", [
    (["--agent", "tiny", "--consistency-samples", "-1"], "consistency_samples=-1 must be in [0, 1,000]"),
    (["--agent", "simulator", "--consistency-samples", "3"], "consistency_samples=3"),
    (["--agent", "tiny", "--decoding", "free", "--consistency-samples", "2"], "decoding='free'"),
])
def test_bad_sample_counts_are_one_line_naming_the_option(tmp_path, capsys, argv, named):
    # An experiment's option (helper.experiment_options): checked where it is a flag, the experiment entry's line.
    assert helpgate(["collect", *argv, "--episodes", "2", "--out", str(tmp_path / "t")], experiments=True) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "t").exists()


def _common_prefix(a: list[int], b: list[int]) -> list[int]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


@torch.no_grad()
def _logprob(model, prompt, continuation):
    log_probs = torch.log_softmax(model(input_ids=torch.tensor([prompt + continuation])).logits[0].float(), -1)
    return float(sum(log_probs[len(prompt) - 1 + j, t] for j, t in enumerate(continuation)))
