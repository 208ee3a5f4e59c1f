"""PPO over the constrained policy's function choices: the renormalised log-probabilities against brute
force, the sampled draws, learning a two-armed choice, and a ProductQA run that resumes exactly."""

from __future__ import annotations

import json
import random

import pytest
import torch

from agile.executor.policy import LLMPolicy
from agile.models import load_causal_lm
from agile.train.choices import ChoiceSample, Decision, choice_advantages, choice_log_probs, update_choices
from agile.train.ppo import PPOConfig, _flat, build_policy, check_config, train

from productqa_slice import SLICE


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def _brute_force(lm, prompt, candidates):
    """Each candidate scored by its own full forward pass, then renormalised over the candidates."""
    scores = []
    for c in candidates:
        ids = torch.tensor([prompt + c])
        logp = torch.log_softmax(lm(input_ids=ids).logits[0].float(), -1)
        scores.append(sum(float(logp[len(prompt) - 1 + j, c[j]]) for j in range(len(c))))
    scores = torch.tensor(scores)
    return scores - torch.logsumexp(scores, 0)


def test_choice_log_probs_equal_brute_force_and_carry_gradients():
    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    prompt = [5, 17, 3, 99, 41, 8]
    candidates = [[7, 12, 30], [7, 44], [61], [7, 12, 31, 2]]  # shared prefixes and different lengths
    got = choice_log_probs(lm, prompt, candidates)
    with torch.no_grad():
        want = _brute_force(lm, prompt, candidates)
    assert got.detach().tolist() == pytest.approx(want.tolist(), abs=1e-4)
    assert float(got.exp().sum()) == pytest.approx(1.0, abs=1e-6)
    got[0].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in lm.parameters())


def test_advantages_leave_one_out_and_refuse_uneven_tasks():
    samples = [ChoiceSample([], r, t) for r, t in ((1.0, 0), (0.0, 0), (0.5, 1), (0.5, 1))]
    choice_advantages(samples, "loop")
    # LOOP with K = 2: A = r - the other rollout's reward.
    assert [s.advantage for s in samples] == pytest.approx([1.0, -1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="same number of rollouts"):
        choice_advantages(samples[:3], "loop")


def test_update_raises_the_probability_of_the_rewarded_choice():
    """Two functions after one prompt, reward 1 for the first, 0 for the second: pi(first) goes up."""
    from accelerate import Accelerator

    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    cfg = PPOConfig(estimator="loop", decoding="constrained", rollouts_per_task=2, lr=3e-3, lora_r=8,
                    minibatch_size=4, update_epochs=2, kl_coef=0.01)
    model, _ = build_policy(lm, cfg)
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    prompt, candidates = [11, 23, 5, 8, 13], [[40, 41], [42, 43]]

    def p_first():
        with torch.no_grad():
            return float(choice_log_probs(model.lm, prompt, candidates)[0].exp())

    start = p_first()
    for _ in range(3):
        logp = choice_log_probs(model.lm, prompt, candidates).detach()
        samples = [ChoiceSample([Decision(prompt, candidates, k, float(logp[k]))], 1.0 - k, task)
                   for task in range(2) for k in range(2)]
        for s in samples:
            with model.lm.disable_adapter(), torch.no_grad():
                s.ref_logp = [choice_log_probs(model.lm, prompt, candidates)]
        choice_advantages(samples, "loop")
        stats = update_choices(model, optimizer, samples, cfg, accelerator, random.Random(0))
        assert stats["update_decisions"] == 4 * cfg.update_epochs
    assert p_first() > start + 0.1


def test_sampled_functions_follow_the_log_probabilities_and_a_seed():
    from agile.envs.catalog_generator import default_catalog_dir
    from agile.envs.sessions import SplitSessions
    from agile.executor.executor import Executor
    from agile.executor.memory import Embedder, Memory

    lm, tok = load_causal_lm("tiny", device="cpu", seed=1)
    sessions = SplitSessions(default_catalog_dir(seed=0), "train")
    group, questions = sessions.window(2, 0, 1)  # two functions near 0.58 / 0.42
    embedder = Embedder()

    def draws(seed, n=40):
        policy = LLMPolicy(lm, tok, max_new_tokens=4, greedy=False, decoding="constrained", seed=seed)
        executor = Executor(group, questions, tok, Memory(embedder), episode_id="e0")
        out = []
        for _ in range(n):
            policy([executor])
            (decision,) = policy.last_decisions
            out.append(decision)
        return out

    first, again, other = draws(0), draws(0), draws(1)
    assert [d["chosen"] for d in first] == [d["chosen"] for d in again]
    assert [d["chosen"] for d in first] != [d["chosen"] for d in other]
    decision = first[0]
    scores = torch.tensor(list(policy_scores(lm, decision)))
    logp = scores - torch.logsumexp(scores, 0)
    assert decision["logp"] == pytest.approx(float(logp[decision["chosen"]]), abs=1e-4)
    # 40 draws from the same state: each function's share near its probability (3 standard errors).
    for k, p in enumerate(logp.exp().tolist()):
        share = sum(d["chosen"] == k for d in first) / len(first)
        assert abs(share - p) <= 3 * (p * (1 - p) / len(first)) ** 0.5 + 1e-9


def policy_scores(lm, decision):
    with torch.no_grad():
        return _brute_force(lm, decision["prompt"], decision["candidates"]).tolist()


def test_config_refuses_a_critic_for_choices_and_flat_stop_reads_both_curves():
    with pytest.raises(ValueError, match="no critic"):
        check_config(PPOConfig(decoding="constrained", estimator="gae"))
    cfg = PPOConfig(stop_when_flat=2, flat_tolerance=0.03)
    rows = [{"advice_rate": a, "total_score": t} for a, t in ((0.9, 0.1), (0.5, 0.3), (0.42, 0.40), (0.40, 0.41))]
    assert not _flat(rows[:3], cfg)  # fewer than two windows
    assert not _flat(rows, cfg)  # advice rate 0.70 -> 0.41
    rows += [{"advice_rate": 0.41, "total_score": 0.40}, {"advice_rate": 0.42, "total_score": 0.42}]
    assert _flat(rows, cfg)  # 0.41 / 0.405 -> 0.415 / 0.41


def _cfg(tmp_path, iterations, **kw):
    return PPOConfig(model="tiny", data_root=str(SLICE), groups=["blades"], questions_per_episode=2,
                     episodes_per_iteration=2, iterations=iterations, estimator="loop", rollouts_per_task=2,
                     decoding="constrained", max_new_tokens=4, minibatch_size=2, update_epochs=1, device="cpu",
                     out=str(tmp_path), save=False, **kw)


STABLE = ("sessions", "accuracy", "advice_rate", "human_calls", "mean_reward", "pg_loss", "kl_to_reference",
          "update_decisions", "optimizer_steps")


def test_a_stopped_run_resumes_to_the_same_history(tmp_path):
    whole = train(_cfg(tmp_path / "whole", 2), log=lambda *_: None)["history"]
    train(_cfg(tmp_path / "split", 1), log=lambda *_: None)
    resumed = train(_cfg(tmp_path / "split", 2), log=lambda *_: None)["history"]
    # Equal up to float noise: a resumed process orders some CPU reductions otherwise (a KL of 6.4e-07 against 6.3e-07).
    assert [[r[k] for k in STABLE] for r in resumed] == [pytest.approx([r[k] for k in STABLE], rel=1e-6, abs=1e-6)
                                                         for r in whole]
    assert all(r["update_decisions"] > 0 for r in whole)
    assert (tmp_path / "whole" / "ppo_curve.png").stat().st_size > 0
    with pytest.raises(ValueError, match="differs: advice_cost"):
        train(_cfg(tmp_path / "split", 3, advice_cost=0.5), log=lambda *_: None)


def test_reference_scorer_is_the_model_with_adapters_off_and_lora_sits_on_the_last_layers():
    from agile.train.choices import ReferenceScorer

    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    model, _ = build_policy(lm, PPOConfig(estimator="loop", decoding="constrained", lora_r=4, lora_layers=1))
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    n = lm.config.num_hidden_layers
    assert trained and all(f"layers.{n - 1}." in name for name in trained)
    with torch.no_grad():  # move the adapters away from zero: the policy now differs from the reference
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    prompt, candidates = [5, 17, 3, 99, 41, 8], [[7, 12, 30], [7, 44], [61]]
    scorer = ReferenceScorer(model)
    samples = [ChoiceSample([Decision(prompt, candidates, 0, 0.0)] * 2, 0.0)]
    scorer(samples)
    with model.lm.disable_adapter(), torch.no_grad():
        want = _brute_force(model.lm, prompt, candidates)
    assert samples[0].ref_logp[0].tolist() == pytest.approx(want.tolist(), abs=1e-4)
    assert samples[0].ref_logp[1].tolist() == pytest.approx(want.tolist(), abs=1e-4)  # the second from the cache
    with torch.no_grad():
        policy = _brute_force(model.lm, prompt, candidates)
    assert not torch.allclose(policy, want, atol=1e-3)


def test_a_checkpoint_without_a_newer_setting_resumes_at_its_default(tmp_path):
    from agile.train.checkpoint import checkpoint_path

    train(_cfg(tmp_path, 1), log=lambda *_: None)
    path = checkpoint_path(tmp_path, 0)
    saved = json.loads(path.read_text())
    del saved["config"]["lora_layers"]  # as written before the setting existed
    path.write_text(json.dumps(saved))
    assert len(train(_cfg(tmp_path, 2), log=lambda *_: None)["history"]) == 2
    with pytest.raises(ValueError, match="differs: lora_layers"):
        train(_cfg(tmp_path, 3, lora_layers=1), log=lambda *_: None)
