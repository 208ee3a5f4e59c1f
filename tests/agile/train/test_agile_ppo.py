"""Session-level PPO: the losses against hand values, action-token-only scoring, learning on the
tiny model, and one real ProductQA iteration."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from agile.executor.executor import SessionRecord
from agile.executor.policy import ActionLM, pad_batch
from agile.models import load_causal_lm
from agile.train.ppo import (
    PPOConfig,
    Sample,
    build_policy,
    check_config,
    kl_k3,
    policy_loss,
    prepare,
    proxy_bonus,
    train,
    update,
    value_loss,
)

from productqa_slice import SLICE

ROOT = SLICE  # the bundled ProductQA slice, so these run on a fresh clone


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm("tiny", device="cpu", seed=0)


def test_clipped_ratio_hand_values_and_gradients():
    # Four tokens: (A, ratio) = (+1, 1.5), (+1, 0.5), (-1, 1.5), (-1, 0.5); eps = 0.2.
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.5, 0.5]])).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4)
    loss, clip_fraction, approx_kl = policy_loss(logp, old, adv, mask, clip_eps=0.2)
    # max(-1.5, -1.2) = -1.2; max(-0.5, -0.8) = -0.5; max(1.5, 1.2) = 1.5; max(0.5, 0.8) = 0.8
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.5 + 0.8) / 4)
    assert clip_fraction.item() == 1.0
    assert approx_kl.item() == pytest.approx(-(math.log(1.5) * 2 + math.log(0.5) * 2) / 4)
    loss.backward()
    # Clipped tokens get no gradient; d(-A r)/d logp = -A r on the others.
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.5 / 4, 1.5 / 4, 0.0])


def test_losses_ignore_masked_tokens():
    torch.manual_seed(0)
    logp = torch.randn(2, 6, requires_grad=True)
    values = torch.randn(2, 6, requires_grad=True)
    old, ref, adv, ret = (torch.randn(2, 6) for _ in range(4))
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 1, 1, 0]])
    total = (policy_loss(logp, old, adv, mask, 0.2)[0] + value_loss(values, old, ret, mask, 0.2)
             + kl_k3(logp, ref, mask))
    total.backward()
    assert torch.all(logp.grad[mask == 0] == 0) and torch.all(values.grad[mask == 0] == 0)
    assert torch.all(logp.grad[mask == 1] != 0)
    # Changing anything at a masked position leaves the loss unchanged.
    noisy = logp.detach().clone()
    noisy[mask == 0] += 100.0
    again = policy_loss(noisy, old, adv, mask, 0.2)[0] + kl_k3(noisy, ref, mask)
    before = policy_loss(logp.detach(), old, adv, mask, 0.2)[0] + kl_k3(logp.detach(), ref, mask)
    assert again.item() == pytest.approx(before.item())


def test_value_loss_and_kl_hand_values():
    v = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.5, 0.0]])
    ret = torch.tensor([[0.0, 1.0]])
    mask = torch.ones(1, 2)
    # token 0: max((1-0)^2, (0.7-0)^2) = 1; token 1: max(1, 1) = 1 -> 0.5 * mean = 0.5
    assert value_loss(v, old, ret, mask, 0.2).item() == pytest.approx(0.5)
    assert kl_k3(v, v, mask).item() == 0.0
    d = 0.5  # ref - logp
    assert kl_k3(torch.zeros(1, 1), torch.full((1, 1), d), torch.ones(1, 1)).item() == \
        pytest.approx(math.exp(d) - d - 1)


def test_action_lm_scores_exactly_the_action_tokens(tiny):
    lm, tokenizer = tiny
    model = ActionLM(lm, value_head=True).eval()
    a = list(range(100, 120))
    b = list(range(300, 312))
    mask_a = [0] * 14 + [1] * 6
    mask_b = [0] * 8 + [1] * 3 + [0]
    batch = pad_batch([(a, mask_a), (b, mask_b)], tokenizer.pad_token_id)
    with torch.no_grad():
        out = model(**batch)
        full = torch.log_softmax(lm(input_ids=batch["input_ids"],
                                    attention_mask=batch["attention_mask"]).logits.float(), -1)
    for row, (ids, mask) in enumerate([(a, mask_a), (b, mask_b)]):
        for t in range(len(ids)):
            if mask[t]:
                assert out["logp"][row, t].item() == pytest.approx(full[row, t - 1, ids[t]].item(), abs=1e-5)
            else:
                assert out["logp"][row, t].item() == 0.0 and out["values"][row, t].item() == 0.0
    # Tokens after the last action cannot change its scores (causal model, mask 0 there).
    changed = pad_batch([(a, mask_a), (b[:-1] + [999], mask_b)], tokenizer.pad_token_id)
    with torch.no_grad():
        assert torch.equal(model(**changed)["logp"], out["logp"])


def test_proxy_bonus_hand_values():
    def record(advised, similar_later, n_similar):
        return SessionRecord("e", "g", 0, "q", "fact_qa", [], None, True, advised, False, None,
                             False, 0.7, n_similar, similar_later, 1)
    assert proxy_bonus(record(True, True, 1), beta=0.1) == pytest.approx(0.05)
    assert proxy_bonus(record(True, True, 0), beta=0.1) == pytest.approx(0.1)
    assert proxy_bonus(record(True, False, 0), beta=0.1) == 0.0
    assert proxy_bonus(record(False, True, 0), beta=0.1) == 0.0


def test_config_checks():
    with pytest.raises(ValueError, match="rollouts_per_task must be >= 2"):
        check_config(PPOConfig(estimator="loop", rollouts_per_task=1))
    with pytest.raises(ValueError, match="use gae, loop, grpo, distinct or natural"):
        check_config(PPOConfig(estimator="reinforce"))


def _bandit(tokenizer):
    prompt = tokenizer("Question: pick one.\n", add_special_tokens=False).input_ids
    good = tokenizer("[PredictAnswer] yes\n", add_special_tokens=False).input_ids
    bad = tokenizer("[PredictAnswer] no\n", add_special_tokens=False).input_ids

    def sample(cont, reward, task):
        return Sample(prompt + cont, [0] * len(prompt) + [1] * len(cont), reward, task)
    return [sample(good, 1.0, 0), sample(bad, 0.0, 0), sample(good, 1.0, 1), sample(bad, 0.0, 1)]


@pytest.mark.parametrize("estimator", ["gae", "loop", "grpo"])
def test_ppo_steps_raise_the_reward_of_a_learnable_task(estimator):
    """Two continuations of one prompt, reward 1 and 0: the expected reward of the policy
    restricted to them, pi(good) / (pi(good) + pi(bad)), must go up."""
    from accelerate import Accelerator

    lm, tokenizer = load_causal_lm("tiny", device="cpu", seed=0)
    cfg = PPOConfig(estimator=estimator, rollouts_per_task=2, lr=3e-3, lora_r=8, minibatch_size=4,
                    micro_batch_size=2, update_epochs=2, kl_coef=0.01)
    model, ref = build_policy(lm, cfg)
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    policy, optimizer = accelerator.prepare(model, optimizer)
    samples = _bandit(tokenizer)
    pair = pad_batch([(s.input_ids, s.action_mask) for s in samples[:2]], tokenizer.pad_token_id)

    def expected_reward():
        with torch.no_grad():
            return torch.softmax(model(**pair)["logp"].sum(1), 0)[0].item()

    start = expected_reward()
    rng = random.Random(0)
    for it in range(3):
        prepared = prepare(model, ref, samples, cfg, tokenizer.pad_token_id, "cpu")
        stats = update(policy, optimizer, prepared, cfg, tokenizer.pad_token_id, accelerator, rng)
        if it == 0:
            # Fresh LoRA (B = 0): policy == reference, and the first step's ratio is exactly 1.
            assert prepared.kl == pytest.approx(0.0, abs=1e-6)
            assert stats["first_clip_fraction"] == 0.0
            assert stats["first_approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert expected_reward() > start + 0.2


def test_gae_advantages_from_prepare_match_hand_values(tiny):
    lm, tokenizer = tiny
    cfg = PPOConfig(estimator="gae", kl_coef=0.0, lam=0.5, gamma=1.0, whiten_advantages=False)
    model, ref = build_policy(lm, cfg)
    samples = _bandit(tokenizer)[:1]
    prepared = prepare(model, ref, samples, cfg, tokenizer.pad_token_id, "cpu")
    mask = torch.tensor(samples[0].action_mask).bool()
    n = int(mask.sum())
    # Zero-initialised critic: V = 0, so A_t = lam^(n-1-t) * R with R = 1 on the last token.
    assert prepared.advantages[0][mask].tolist() == pytest.approx([0.5 ** (n - 1 - t) for t in range(n)])
    assert torch.all(prepared.advantages[0][~mask] == 0)
    # The adapters were only wrapped around lm; unwrap them for the other tests.
    model.lm.unload()


@pytest.mark.parametrize("estimator,k", [("gae", 1), ("loop", 2)])
def test_one_productqa_iteration_runs(tmp_path, estimator, k):
    cfg = PPOConfig(model="tiny", data_root=str(ROOT), groups=["blades"], questions_per_episode=2, episodes_per_iteration=2,
                    iterations=1, estimator=estimator, rollouts_per_task=k, max_new_tokens=4,
                    minibatch_size=2, micro_batch_size=2, update_epochs=1, device="cpu",
                    out=str(tmp_path), save=True)
    result = train(cfg, log=lambda *_: None)
    (row,) = result["history"]
    sessions = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert row["sessions"] == row["update_sessions"] == len(sessions) == 2 * 2 * k
    # One epoch over minibatches of 2 sessions: one optimizer step per minibatch.
    assert row["optimizer_steps"] == 2 * 2 * k // 2
    # The row's metrics are those of the logged sessions.
    assert row["accuracy"] == pytest.approx(sum(s["correct"] for s in sessions) / len(sessions))
    assert row["human_calls"] == sum(s["advised"] for s in sessions)
    # Every action token of a session was generated; a turn generates at most max_new_tokens.
    action_tokens = sum(s["n_action_tokens"] for s in sessions)
    assert action_tokens <= row["rollout_generated_tokens"] <= 4 * sum(s["turns"] for s in sessions)
    assert row["update_tokens_per_s"] == pytest.approx(row["update_tokens"] / row["update_seconds"])
    assert {s["group"] for s in sessions} == {"blades"}
    saved = json.loads((tmp_path / "ppo_history.json").read_text())
    assert saved["history"][0]["sessions"] == row["sessions"] and saved["training_human_calls"] == row["human_calls"]
    assert (tmp_path / "model" / "config.json").is_file()
