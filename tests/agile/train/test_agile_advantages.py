"""Advantage estimators and AGILE metrics against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from agile.executor.scores import average, question_reward, summarize, total_score
from agile.train.advantages import gae, gae_segments, grpo, loop, whiten


def test_gae_hand_values():
    # T = 3, gamma = 0.9, lam = 0.5; V after the last step is 0.
    r = torch.tensor([0.0, 0.0, 1.0])
    v = torch.tensor([0.5, 0.6, 0.7])
    adv, ret = gae(r, v, gamma=0.9, lam=0.5)
    d2 = 1.0 - 0.7                      # 0.3
    d1 = 0.0 + 0.9 * 0.7 - 0.6          # 0.03
    d0 = 0.0 + 0.9 * 0.6 - 0.5          # 0.04
    a2 = d2
    a1 = d1 + 0.45 * a2                 # 0.165
    a0 = d0 + 0.45 * a1                 # 0.11425
    assert adv.tolist() == pytest.approx([a0, a1, a2])
    assert ret.tolist() == pytest.approx([a0 + 0.5, a1 + 0.6, a2 + 0.7])


def test_gae_gamma_one_lambda_one_is_return_minus_value():
    r = torch.tensor([0.1, -0.2, 1.0])
    v = torch.tensor([0.3, 0.2, 0.1])
    adv, ret = gae(r, v, gamma=1.0, lam=1.0)
    assert ret.tolist() == pytest.approx([0.9, 0.8, 1.0])
    assert adv.tolist() == pytest.approx([0.6, 0.6, 0.9])


def test_gae_segments_keeps_trajectories_apart():
    r = torch.tensor([0.0, 1.0, 2.0])
    v = torch.zeros(3)
    adv, _ = gae_segments(r, v, torch.tensor([0, 0, 1]), gamma=1.0, lam=1.0)
    assert adv.tolist() == pytest.approx([1.0, 1.0, 2.0])  # the 2 of segment 1 does not leak back


def test_loop_leave_one_out_hand_values():
    returns = torch.tensor([[1.0, 0.0, 0.5], [2.0, 2.0, 2.0]])
    adv = loop(returns)
    # 1 - (0 + 0.5)/2 = 0.75; 0 - (1 + 0.5)/2 = -0.75; 0.5 - (1 + 0)/2 = 0
    assert adv.flatten().tolist() == pytest.approx([0.75, -0.75, 0.0, 0.0, 0.0, 0.0])


def test_grpo_hand_values():
    returns = torch.tensor([[1.0, 0.0, 0.5, 0.5]])
    adv = grpo(returns, eps=0.0)
    # mean 0.5; sample std: sqrt((0.5² + 0.5²) / 3)
    std = (((0.5 ** 2) * 2) / 3) ** 0.5
    assert adv[0].tolist() == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0])
    assert grpo(torch.tensor([[1.0, 1.0]])).tolist() == [[0.0, 0.0]]  # eps avoids 0 / 0


def test_group_estimators_need_two_rollouts():
    with pytest.raises(ValueError, match="rollouts_per_task >= 2"):
        loop(torch.tensor([[1.0], [0.0]]))
    with pytest.raises(ValueError, match="rollouts_per_task >= 2"):
        grpo(torch.tensor([1.0, 0.0]))


def test_whiten():
    x = whiten(torch.tensor([1.0, 2.0, 3.0]))
    assert x.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert x.std().item() == pytest.approx(1.0, abs=1e-5)


def test_agile_metrics_hand_values():
    correct = [True, True, False, True]
    advised = [True, False, False, False]
    s = summarize(correct, advised, advice_cost=0.3)
    assert s == {"n": 4.0, "accuracy": 0.75, "advice_rate": 0.25,
                 "total_score": pytest.approx(0.75 - 0.3 * 0.25)}
    assert total_score(0.8, 0.5, 0.1) == pytest.approx(0.75)
    assert question_reward(True, True, 0.3) == pytest.approx(0.7)
    assert question_reward(False, False) == 0.0
    # The mean per-question reward equals the total score.
    rewards = [question_reward(c, a, 0.3) for c, a in zip(correct, advised)]
    assert sum(rewards) / 4 == pytest.approx(s["total_score"])
    avg = average([s, summarize([False], [False])])
    assert avg["accuracy"] == pytest.approx(0.375) and avg["n"] == 5.0
    with pytest.raises(ValueError, match="one flag of each"):
        summarize([True], [])
