"""Imitation data from the gold annotations, and SFT on the tiny model."""

from __future__ import annotations

import pytest
import torch

from agile.envs.productqa import load_group
from agile import functions as fn
from agile.executor.memory import Embedder
from agile.executor.policy import ActionLM, pad_batch
from agile.models import load_causal_lm, load_tokenizer
from agile.train.sft import SFTConfig, action_nll, save_model, train_sft
from agile.train.sft_data import GoldPolicy, build_sft_records, load_samples, save_records

from productqa_slice import SLICE

ROOT = SLICE  # the bundled ProductQA slice, so these run on a fresh clone


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def records():
    group = load_group(ROOT / "train" / "blades")
    return build_sft_records([group], load_tokenizer("tiny"), Embedder(), 12, advice_share=1.0)


def test_gold_sessions_are_correct_and_in_the_agents_format(records):
    tokenizer = load_tokenizer("tiny")
    assert len(records) == 12 and all(r.correct for r in records)
    for r in records:
        actions = tokenizer.decode([i for i, m in zip(r.input_ids, r.action_mask) if m])
        calls = [fn.parse_call(line) for line in actions.splitlines()]
        assert all(c is not None for c in calls), actions
        if r.qtype == "search_qa":
            assert calls[0].name == fn.SEARCH_PRODUCT and calls[0].argument.upper().startswith("SELECT")
        if r.advised:
            assert [c.name for c in calls] == [fn.SEEK_ADVICE, fn.REFLECTION]
    # advice_share=1: every fact/reasoning session whose answer memory lacks seeks advice, and a
    # reasoning question's knowledge is stored by its reflection.
    assert any(r.advised for r in records)
    assert all(r.reflection_stored for r in records if r.advised and r.qtype == "reasoning_qa")


def test_advice_share_zero_never_asks():
    group = load_group(ROOT / "train" / "blades")
    recs = build_sft_records([group], load_tokenizer("tiny"), Embedder(), 6, advice_share=0.0)
    assert not any(r.advised for r in recs)
    with pytest.raises(ValueError, match="advice_share"):
        GoldPolicy(advice_share=1.5)


def test_records_round_trip(tmp_path, records):
    path = save_records(records, tmp_path / "sft.jsonl")
    samples = load_samples(path)
    assert samples == [(r.input_ids, r.action_mask) for r in records]


def test_sft_loss_decreases_on_the_tiny_model(tmp_path, records):
    lm, tokenizer = load_causal_lm("tiny", device="cpu", seed=0)
    samples = [(r.input_ids, r.action_mask) for r in records[:4]]
    model = ActionLM(lm)
    cfg = SFTConfig(lr=3e-3, batch_size=4, micro_batch_size=2, epochs=10, max_steps=8, lora_r=0,
                    device="cpu")
    batch = pad_batch(samples, tokenizer.pad_token_id)
    with torch.no_grad():
        before = action_nll(model, batch).item()
    losses = train_sft(model, samples, cfg, tokenizer.pad_token_id, log=lambda *_: None)
    assert len(losses) == 8
    assert losses[0] == pytest.approx(before, rel=1e-4)  # step 1 reports the starting loss
    with torch.no_grad():
        after = action_nll(model, batch).item()
    assert after < before - 1.0 and losses[-1] < losses[0]
    # The saved folder loads back through the one model loader, with the same scores.
    folder = save_model(model, tokenizer, tmp_path / "model")
    again, _ = load_causal_lm(str(folder), device="cpu")
    with torch.no_grad():
        assert action_nll(ActionLM(again), batch).item() == pytest.approx(after, rel=1e-4)


def test_lora_sft_trains_only_adapters(records):
    from agile.train.sft import add_lora

    lm, tokenizer = load_causal_lm("tiny", device="cpu", seed=0)
    model = ActionLM(add_lora(lm, r=4, alpha=8, dropout=0.0))
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    samples = [(r.input_ids, r.action_mask) for r in records[:2]]
    cfg = SFTConfig(lr=1e-2, batch_size=2, micro_batch_size=1, max_steps=2, device="cpu")
    train_sft(model, samples, cfg, tokenizer.pad_token_id, log=lambda *_: None)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert any(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)
