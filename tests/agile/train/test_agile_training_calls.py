"""PPO's training cost in human calls: every [SeekAdvice] of a rollout is one."""

from __future__ import annotations

import json

import pytest

from agile.train.ppo import PPOConfig, train
from agile.train.sft import SFTConfig, run_sft

from productqa_slice import SLICE

ROOT = SLICE  # the bundled ProductQA slice, so these run on a fresh clone


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def test_training_human_calls_are_the_advice_taken_in_rollouts(tmp_path):
    # A tiny model taught on advice-only gold sessions, so that its rollouts do seek advice; sampled at temperature 1
    # (after 60 steps the nearly greedy 0.05 kept another function on top on some CPUs' float orders).
    run_sft(SFTConfig(model="tiny", data_root=str(ROOT), groups=["blades"], questions_per_group=4, advice_share=1.0, epochs=60,
                      max_steps=60, lr=1e-2, lora_r=0, batch_size=4, micro_batch_size=4, device="cpu",
                      out=str(tmp_path / "sft"), save=True, log_every=100))
    # The tiny model seeks advice in a few of 16 sampled sessions (0 to 3 measured over PPO seeds): the count is
    # checked on the first seed whose rollouts sought advice at all, so it is never checked on an empty count.
    for seed in range(8):
        out = tmp_path / f"ppo{seed}"
        result = train(PPOConfig(model=str(tmp_path / "sft" / "model"), data_root=str(ROOT), groups=["blades"],
                                 questions_per_episode=2, episodes_per_iteration=2, iterations=2, estimator="loop",
                                 rollouts_per_task=2, max_new_tokens=8, temperature=1.0, minibatch_size=4,
                                 micro_batch_size=2, update_epochs=1, device="cpu", out=str(out), save=False,
                                 seed=seed), log=lambda *_: None)
        sessions = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
        assert len(sessions) == 2 * 2 * 2 * 2  # iterations x episodes x questions x rollouts per session
        seen = sum("[SeekAdvice]" in s["functions"] for s in sessions)
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["training_human_calls"] == result["training_human_calls"] == seen
        if seen:
            break
    assert seen > 0, "no rollout of 8 seeds sought advice"
    assert metrics["training_human_calls"] == result["training_human_calls"] == seen
    assert sum(row["human_calls"] for row in result["history"]) == seen
    assert metrics["rollout_sessions"] == len(sessions)
