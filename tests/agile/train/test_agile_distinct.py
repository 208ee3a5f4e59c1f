"""PPO's ``distinct`` estimator: a session's copies draw distinct functions (without replacement from the policy)
and each copy's advantage is its share of the all-action policy gradient. Checked against brute force (inclusion
probabilities over every ordered draw, the exact gradient of the expected reward), on the real decoder (distinct
functions, first copy distributed as the policy), in an update that learns to answer where answering pays more
than asking, and in a ProductQA run that logs the policy's ask probability by phrasing."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch

from agile.executor.policy import LLMPolicy
from agile.models import load_causal_lm
from agile.train.choices import (
    ChoiceSample,
    Decision,
    choice_advantages,
    choice_log_probs,
    inclusion_probabilities,
    mean_kl_to_reference,
    update_choices,
)
from agile.train.ppo import PPOConfig, _flat, build_policy, check_config, train

from productqa_slice import SLICE


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def _by_enumeration(p, k):
    """Every ordered draw of min(k, n) distinct items, its probability, summed per item."""
    n, out = len(p), [0.0] * len(p)
    for order in itertools.permutations(range(n), min(k, n)):
        prob, left = 1.0, 1.0
        for i in order:
            prob *= p[i] / left
            left -= p[i]
        for i in order:
            out[i] += prob
    return out


@pytest.mark.parametrize("p,k", [([0.5, 0.3, 0.2], 2), ([0.94, 0.05, 0.01], 2), ([0.7, 0.3], 2),
                                 ([0.6, 0.3, 0.1], 1), ([0.1, 0.2, 0.3, 0.4], 3), ([0.5, 0.3, 0.2], 5)])
def test_inclusion_probabilities_equal_enumeration(p, k):
    got = inclusion_probabilities(p, k)
    assert got == pytest.approx(_by_enumeration(p, k), abs=1e-12)
    assert sum(got) == pytest.approx(min(k, len(p)))


def test_inclusion_probabilities_of_a_saturated_policy():
    """One candidate holds all but 1e-20 of the mass: total - drawn rounds to 0, the second draw still divides
    by the mass left (a head trained hard saturated a rollout's policy so)."""
    assert inclusion_probabilities([1.0, 1e-20], 2) == pytest.approx([1.0, 1.0])
    assert inclusion_probabilities([1.0, 1e-20, 3e-20], 2) == pytest.approx([1.0, 0.25, 0.75])


def _task(logits, chosen, rewards, task=0):
    logps = torch.log_softmax(torch.tensor(logits, dtype=torch.float64), 0).tolist()
    return [ChoiceSample([Decision([1], [[2]] * len(logits), a, logps[a], logps, [], False, True)], r, task)
            for a, r in zip(chosen, rewards)]


def test_all_functions_seen_gives_the_exact_gradient_of_the_expected_reward():
    """K = 2 copies, two functions (yes/no-phrased: ask or answer): the copies' advantages times grad log pi sum
    to grad of sum_a pi(a) Q(a), whatever the rewards and the probabilities."""
    for logits, q in (([2.9, 0.0], [0.5, 1.0]), ([-1.0, 0.5], [0.2, 0.0]), ([0.0, 3.0, -1.0], [0.5, 0.08, 0.0])):
        chosen = list(range(len(logits)))
        samples = _task(logits, chosen, q)
        choice_advantages(samples, "distinct")
        theta = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        surrogate = sum(s.advantage * torch.log_softmax(theta, 0)[a] for s, a in zip(samples, chosen))
        (got,) = torch.autograd.grad(surrogate, theta)
        theta = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        (want,) = torch.autograd.grad((torch.softmax(theta, 0) * torch.tensor(q, dtype=torch.float64)).sum(), theta)
        assert got.tolist() == pytest.approx(want.tolist(), abs=1e-12)


def test_asking_at_probability_095_is_pushed_down_where_answering_pays():
    """pi(ask) = 0.95, ask earns 1 - c = 0.5, answering earns 1: the ask copy's advantage is negative, the
    answer copy's positive, on every session (the sampled estimator sees both in about one session in ten)."""
    samples = _task([0.0, -2.944], [0, 1], [0.5, 1.0])
    choice_advantages(samples, "distinct")
    assert samples[0].advantage < 0 < samples[1].advantage
    # pi(a) (Q(a) - b), b = 0.95 * 0.5 + 0.05 * 1.0 = 0.525.
    assert samples[0].advantage == pytest.approx(0.95 * (0.5 - 0.525), abs=1e-3)
    assert samples[1].advantage == pytest.approx(0.05 * (1.0 - 0.525), abs=1e-3)


def test_the_logged_kl_is_the_exact_kl_over_the_allowed_functions_never_negative():
    """Two copies drew distinct functions from pi = (0.9, 0.1) against ref = (0.5, 0.5): the chosen functions' mean
    log pi - log ref is (log 1.8 + log 0.2) / 2 < 0, the KL itself 0.9 log 1.8 + 0.1 log 0.2 > 0."""
    import math

    pi, ref = [math.log(0.9), math.log(0.1)], torch.log(torch.tensor([0.5, 0.5]))
    samples = [ChoiceSample([Decision([1], [[2], [3]], chosen, pi[chosen], list(pi), spread=True)], 0.0)
               for chosen in (0, 1)]
    for sample in samples:
        sample.ref_logp = [ref]
    exact = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    assert mean_kl_to_reference(samples) == pytest.approx(exact, abs=1e-6) and exact > 0
    assert (math.log(1.8) + math.log(0.2)) / 2 < 0  # what was logged before
    for sample in samples:
        sample.ref_logp = [torch.tensor(pi)]
    assert mean_kl_to_reference(samples) == pytest.approx(0.0, abs=1e-6)


def test_three_functions_two_copies_is_unbiased_for_a_fixed_baseline():
    """Two of three functions seen: the Horvitz-Thompson terms pi(a) / q(a) Q(a) grad log pi(a), averaged over
    every possible draw of two, give the exact gradient (a baseline held fixed adds zero in expectation)."""
    logits, q = [0.5, 1.0, -0.5], [0.5, 0.08, 0.9]
    p = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0).tolist()
    incl = inclusion_probabilities(p, 2)
    theta = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    expected = torch.zeros(3, dtype=torch.float64)
    for order in itertools.permutations(range(3), 2):
        prob = p[order[0]] * p[order[1]] / (1 - p[order[0]])
        term = sum(p[a] / incl[a] * q[a] * logp[a] for a in order)
        expected += prob * torch.autograd.grad(term, theta, retain_graph=True)[0]
    theta2 = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    (want,) = torch.autograd.grad((torch.softmax(theta2, 0) * torch.tensor(q, dtype=torch.float64)).sum(), theta2)
    assert expected.tolist() == pytest.approx(want.tolist(), abs=1e-12)


@pytest.mark.parametrize("logits,q", [([2.9, 0.0], [0.4, 0.626]), ([-4.0, 4.0], [0.4, 0.07]),
                                      ([0.0, 3.0, -1.0], [0.4, 0.08, 0.12])])
def test_natural_moves_each_logit_by_its_advantage_whatever_pi_is(logits, q):
    """Every function seen: the copies' natural advantages times grad log pi sum to Q - mean Q in the logits (the
    natural gradient of a softmax), where the plain gradient pi (Q - b) fades as pi saturates."""
    chosen = list(range(len(logits)))
    samples = _task(logits, chosen, q)
    choice_advantages(samples, "natural")
    theta = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    (got,) = torch.autograd.grad(sum(s.advantage * torch.log_softmax(theta, 0)[a] for s, a in zip(samples, chosen)),
                                 theta)
    mean = sum(q) / len(q)
    assert got.tolist() == pytest.approx([x - mean for x in q], abs=1e-12)
    plain = _task(logits, chosen, q)
    choice_advantages(plain, "distinct")
    (vanilla,) = torch.autograd.grad(sum(s.advantage * torch.log_softmax(theta, 0)[a] for s, a in zip(plain, chosen)),
                                     theta)
    # At pi(ask) = 0.95 the plain push towards answering is a fifth of the natural one.
    if logits == [2.9, 0.0]:
        assert abs(vanilla[0]) < 0.25 * abs(got[0])


def test_config_needs_constrained_decoding_and_two_copies_and_flat_reads_the_ask_probability():
    with pytest.raises(ValueError, match="constrained decoding"):
        check_config(PPOConfig(estimator="distinct", rollouts_per_task=2))
    with pytest.raises(ValueError, match="natural draws distinct functions"):
        check_config(PPOConfig(estimator="natural", rollouts_per_task=2))
    check_config(PPOConfig(estimator="natural", decoding="constrained", rollouts_per_task=2))
    with pytest.raises(ValueError, match="rollouts_per_task must be >= 2"):
        check_config(PPOConfig(estimator="distinct", decoding="constrained", rollouts_per_task=1))
    cfg = PPOConfig(estimator="distinct", decoding="constrained", rollouts_per_task=2, stop_when_flat=1)
    # The rollouts' advice rate is fixed by the draw; the policy's ask probability still moves.
    rows = [{"advice_rate": 0.5, "total_score": 0.6, "ask_prob": a} for a in (0.9, 0.6)]
    assert not _flat(rows, cfg)
    assert _flat(rows + [{"advice_rate": 0.5, "total_score": 0.6, "ask_prob": 0.61}], cfg)


def test_copies_draw_distinct_functions_and_the_first_copy_follows_the_policy():
    from agile.envs.catalog_generator import default_catalog_dir
    from agile.envs.sessions import SplitSessions
    from agile.executor.executor import Executor
    from agile.executor.memory import Embedder, Memory

    lm, tok = load_causal_lm("tiny", device="cpu", seed=1)
    group, questions = SplitSessions(default_catalog_dir(seed=0), "train").window(2, 0, 1)
    policy = LLMPolicy(lm, tok, max_new_tokens=4, greedy=False, decoding="constrained", seed=0)
    main = Executor(group, questions, tok, Memory(Embedder()), episode_id="e0")
    firsts = []
    for key in range(60):
        copies = [main.clone(), main.clone()]
        for j, c in enumerate(copies):
            c.spread_draw = (f"task{key}", j)
        policy(copies)
        a, b = policy.last_decisions
        assert a["chosen"] != b["chosen"] and a["spread"] and b["spread"]
        assert a["logps"] == pytest.approx(b["logps"]) and len(a["logps"]) == len(a["functions"]) >= 2
        firsts.append(a["chosen"])
        assert all(getattr(c, "spread_draw", None) is None for c in copies)  # read once: later turns sample
    p = torch.tensor(a["logps"]).exp().tolist()
    for k, pk in enumerate(p):
        share = sum(f == k for f in firsts) / len(firsts)
        assert abs(share - pk) <= 3 * (pk * (1 - pk) / len(firsts)) ** 0.5 + 1e-9


@pytest.mark.parametrize("estimator", ["distinct", "natural"])
def test_update_with_distinct_advantages_lowers_asking_where_answering_pays(estimator):
    from accelerate import Accelerator

    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    cfg = PPOConfig(estimator=estimator, decoding="constrained", rollouts_per_task=2, lr=3e-3, lora_r=8,
                    minibatch_size=4, update_epochs=2, kl_coef=0.01)
    model, _ = build_policy(lm, cfg)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    prompt, candidates = [11, 23, 5, 8, 13], [[40, 41], [42, 43]]  # 0: ask (earns 0.5), 1: answer (earns 1)

    def p_ask():
        with torch.no_grad():
            return choice_log_probs(model.lm, prompt, candidates).exp()[0].item()

    start = p_ask()
    for _ in range(3):
        logps = choice_log_probs(model.lm, prompt, candidates).detach().tolist()
        samples = [ChoiceSample([Decision(prompt, candidates, a, logps[a], logps, [], True, True)], 0.5 + 0.5 * a, task)
                   for task in range(2) for a in range(2)]
        for s in samples:
            with model.lm.disable_adapter(), torch.no_grad():
                s.ref_logp = [choice_log_probs(model.lm, prompt, candidates)]
        choice_advantages(samples, estimator)
        update_choices(model, optimizer, samples, cfg, Accelerator(cpu=True), random.Random(0))
    assert p_ask() < start - 0.1


@pytest.mark.parametrize("estimator", ["distinct", "natural"])
def test_a_productqa_run_logs_the_ask_probability_by_phrasing(tmp_path, estimator):
    cfg = PPOConfig(model="tiny", data_root=str(SLICE), groups=["blades"], questions_per_episode=3,
                    episodes_per_iteration=2, iterations=1, estimator=estimator, rollouts_per_task=2,
                    decoding="constrained", max_new_tokens=4, minibatch_size=4, update_epochs=1, device="cpu",
                    out=str(tmp_path), save=False)
    (row,) = train(cfg, log=lambda *_: None)["history"]
    rows = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == row["sessions"] == 12
    choices = ("[SeekAdvice]", "[SearchProduct]", "[PredictAnswer]")
    for a, b in zip(rows[0::2], rows[1::2]):  # the two copies of a session
        assert a["question_id"] == b["question_id"] and a["ask_prob"] == pytest.approx(b["ask_prob"])
        first = [next(f for f in r["functions"] if f in choices) for r in (a, b)]
        assert first[0] != first[1]
    yes_no = [r for r in rows if r["yes_no"]]
    other = [r for r in rows if not r["yes_no"]]
    if yes_no:
        assert row["ask_prob_yes_no"] == pytest.approx(sum(r["ask_prob"] for r in yes_no) / len(yes_no))
    if other:
        assert row["ask_prob_other"] == pytest.approx(sum(r["ask_prob"] for r in other) / len(other))
    assert row["human_calls"] == sum(r["advised"] for r in rows)
