"""PPO's choice head (``agile.executor.choice_head``): a linear map of the choice state moving ``[SeekAdvice]``'s
score. Checked: the state the decoder reads (one token again on the cached prompt) is the prompt's final hidden
state; the update's scores with the head are the brute-force scores plus the head's shift; the frozen-LM shortcut
is the same function; the decoder's turns follow the head; an update learns to ask on one state and answer on
another (what one shared shift cannot); a run with the head resumes to the same history, and its saved head is
what evaluation loads."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agile import functions as fn
from agile.executor.choice_head import (
    FILE_NAME,
    ChoiceHead,
    ask_margins,
    backbone,
    choice_state,
    load_choice_head,
    shift_for_rate,
)
from agile.models import load_causal_lm
from agile.train.choices import ChoiceSample, Decision, choice_advantages, choice_log_probs, head_log_probs, update_choices
from agile.train.ppo import PPOConfig, build_policy, check_config, param_groups, train

from productqa_slice import SLICE


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def _head(hidden: int, seed: int = 0) -> ChoiceHead:
    g = torch.Generator().manual_seed(seed)
    head = ChoiceHead(hidden)
    with torch.no_grad():
        head.weight.copy_(torch.randn(hidden, generator=g))
        head.bias.fill_(0.3)
        head.mean.copy_(torch.randn(hidden, generator=g))
        head.scale.copy_(torch.rand(hidden, generator=g) + 0.5)
    return head


def test_choice_state_is_the_prompt_final_hidden_state():
    from agile.agents.prompt_cache import PromptKVCache

    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    prompt = [5, 17, 3, 99, 41, 8, 23]
    _, kv = PromptKVCache(lm).prefill(prompt)
    with torch.no_grad():
        want = backbone(lm)(input_ids=torch.tensor([prompt])).last_hidden_state[0, -1]
    assert choice_state(lm, prompt, kv).tolist() == pytest.approx(want.tolist(), abs=1e-4)


def test_scores_with_the_head_are_the_model_scores_plus_its_shift_and_train_the_head():
    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    prompt = [5, 17, 3, 99, 41, 8]
    candidates, functions = [[7, 12, 30], [7, 44], [61]], [fn.PREDICT_ANSWER, fn.SEEK_ADVICE, fn.SEARCH_PRODUCT]
    head = _head(lm.config.hidden_size)
    with torch.no_grad():
        plain = choice_log_probs(lm, prompt, candidates)
        state = backbone(lm)(input_ids=torch.tensor([prompt])).last_hidden_state[0, -1]
        shift = float(((state - head.mean) / head.scale) @ head.weight + head.bias)
    want = plain.clone()
    want[1] += shift
    want -= torch.logsumexp(want, 0)
    got = choice_log_probs(lm, prompt, candidates, head, functions)
    assert got.detach().tolist() == pytest.approx(want.tolist(), abs=1e-4)
    got[1].backward()
    assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0
    # The frozen-LM shortcut: the recorded scores and state give the same distribution.
    decision = Decision(prompt, candidates, 1, 0.0, functions=functions, base_scores=plain.tolist(), state=state)
    assert head_log_probs(decision, head).detach().tolist() == pytest.approx(want.tolist(), abs=1e-5)
    # No [SeekAdvice] among the candidates: the head moves nothing.
    other = choice_log_probs(lm, prompt, candidates[:1] + candidates[2:], head, [fn.PREDICT_ANSWER, fn.SEARCH_PRODUCT])
    assert other.detach().tolist() == pytest.approx(
        (plain[[0, 2]] - torch.logsumexp(plain[[0, 2]], 0)).tolist(), abs=1e-4)


def _executor(tok, questions=1):
    from agile.envs.catalog_generator import default_catalog_dir
    from agile.envs.sessions import SplitSessions
    from agile.executor.executor import Executor
    from agile.executor.memory import Embedder, Memory

    sessions = SplitSessions(default_catalog_dir(seed=0), "train")
    group, qs = sessions.window(questions, 0, 1)
    return Executor(group, qs, tok, Memory(Embedder()), episode_id="e0")


def test_the_decoder_turns_follow_the_head_and_record_what_the_update_reads():
    from agile.executor.policy import LLMPolicy

    lm, tok = load_causal_lm("tiny", device="cpu", seed=1)
    executor = _executor(tok)
    assert fn.SEEK_ADVICE in executor.allowed()
    functions = []
    for bias in (40.0, -40.0):
        head = ChoiceHead(lm.config.hidden_size)
        head.bias.data.fill_(bias)
        policy = LLMPolicy(lm, tok, max_new_tokens=4, greedy=True, decoding="constrained", choice_head=head)
        policy([executor])
        choice = policy.constrained.choices[-1]
        functions.append(choice["function"])
        assert choice["ask_shift"] == pytest.approx(bias)
    assert functions[0] == fn.SEEK_ADVICE and functions[1] != fn.SEEK_ADVICE
    # A sampling decoder records the model's own scores and the state; the draw's log-probabilities include the shift.
    head = _head(lm.config.hidden_size)
    policy = LLMPolicy(lm, tok, max_new_tokens=4, greedy=False, decoding="constrained", seed=0, choice_head=head)
    policy([executor])
    (record,) = policy.last_decisions
    decision = Decision(**record)
    assert decision.state is not None and len(decision.base_scores) == len(decision.candidates)
    assert decision.logps == pytest.approx(head_log_probs(decision, head).tolist(), abs=1e-5)
    with pytest.raises(ValueError, match="needs decoding='constrained'"):
        LLMPolicy(lm, tok, decoding="free", choice_head=head)


def test_the_head_learns_to_ask_on_one_state_and_answer_on_another():
    """Two choice states, the same model scores: asking pays on the first, answering on the second. The head
    (frozen LM, natural advantages) moves the two apart, which one shared ask bias could not."""
    from accelerate import Accelerator

    hidden = 8
    cfg = PPOConfig(decoding="constrained", estimator="natural", rollouts_per_task=2, choice_head=True, freeze_lm=True,
                    head_lr=0.05, minibatch_size=4, update_epochs=2, kl_coef=0.01)
    head = ChoiceHead(hidden)
    with torch.no_grad():
        head.fitted.fill_(True)
    # Opposite states (Adam moves every coordinate at its own rate: the bias alone would move both alike).
    states = [torch.ones(hidden), -torch.ones(hidden)]
    functions, base = [fn.SEEK_ADVICE, fn.PREDICT_ANSWER], [-0.2, -1.7]
    optimizer = torch.optim.AdamW(head.parameters(), lr=cfg.head_lr)

    class Raw(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.choice_head = head

    def p_ask(state):
        d = Decision([1], [[2], [3]], 0, 0.0, functions=functions, base_scores=base, state=state)
        return float(head_log_probs(d, head)[0].detach().exp())

    start = [p_ask(s) for s in states]
    for _ in range(15):
        samples = []
        for task, (state, pays) in enumerate(zip(states, ((0.5, 0.0), (0.2, 1.0)))):
            for a in range(2):  # the two copies take the two functions
                d = Decision([1], [[2], [3]], a, 0.0, functions=functions, base_scores=base, state=state, spread=True)
                logps = head_log_probs(d, head).detach()
                d.logp, d.logps = float(logps[a]), logps.tolist()
                samples.append(ChoiceSample([d], pays[a], task))
        for s in samples:
            s.ref_logp = [torch.tensor(base) - torch.logsumexp(torch.tensor(base), 0)]
        choice_advantages(samples, cfg.estimator)
        update_choices(Raw(), optimizer, samples, cfg, Accelerator(cpu=True), random.Random(0))
    end = [p_ask(s) for s in states]
    assert end[0] > start[0] + 0.05 and end[1] < start[1] - 0.05


def test_config_refuses_a_head_without_constrained_decoding_and_groups_its_learning_rate():
    with pytest.raises(ValueError, match="decoding=constrained"):
        check_config(PPOConfig(choice_head=True, decoding="free"))
    with pytest.raises(ValueError, match="set choice_head=True"):
        check_config(PPOConfig(freeze_lm=True, decoding="constrained", estimator="natural", rollouts_per_task=2))
    lm, _ = load_causal_lm("tiny", device="cpu", seed=0)
    model, ref = build_policy(lm, PPOConfig(decoding="constrained", estimator="natural", rollouts_per_task=2,
                                            choice_head=True, freeze_lm=True, head_lr=0.02))
    groups = param_groups(model, PPOConfig(choice_head=True, freeze_lm=True, head_lr=0.02))
    assert ref is None and [g["lr"] for g in groups] == [0.02]
    assert {id(p) for p in groups[0]["params"]} == {id(model.choice_head.weight), id(model.choice_head.bias)}


def _cfg(tmp_path, iterations, **kw):
    return PPOConfig(model="tiny", data_root=str(SLICE), groups=["blades"], questions_per_episode=2,
                     episodes_per_iteration=2, iterations=iterations, estimator="natural", rollouts_per_task=2,
                     decoding="constrained", max_new_tokens=4, minibatch_size=2, update_epochs=1, device="cpu",
                     choice_head=True, freeze_lm=True, head_lr=0.5, out=str(tmp_path), **kw)


STABLE = ("sessions", "accuracy", "advice_rate", "human_calls", "mean_reward", "pg_loss", "kl_to_reference",
          "update_decisions", "ask_prob")


def test_a_head_run_resumes_to_the_same_history_and_evaluation_loads_its_head(tmp_path):
    from agile.executor.agent_eval import EvalConfig, run_eval

    whole = train(_cfg(tmp_path / "whole", 3), log=lambda *_: None)
    train(_cfg(tmp_path / "split", 1, save=False), log=lambda *_: None)
    resumed = train(_cfg(tmp_path / "split", 3), log=lambda *_: None)
    assert [[r[k] for k in STABLE] for r in resumed["history"]] == [[r[k] for k in STABLE] for r in whole["history"]]
    head = whole["model"].choice_head
    assert bool(head.fitted) and float(head.scale.min()) > 0 and float(head.weight.detach().abs().sum()) > 0
    assert whole["history"][0]["kl_to_reference"] == pytest.approx(0.0, abs=1e-6)  # the head starts at zero
    saved = load_choice_head(tmp_path / "whole" / "model")
    assert saved.state_dict().keys() == head.state_dict().keys()
    assert all(torch.equal(saved.state_dict()[k], head.state_dict()[k].cpu()) for k in head.state_dict())
    # Evaluation of the folder reads the head: one that always asks makes every question advised.
    saved.weight.data.zero_()
    saved.bias.data.fill_(60.0)
    saved.save(tmp_path / "whole" / "model")
    _, tok = load_causal_lm("tiny", device="cpu")
    rows = run_eval(EvalConfig(model=str(tmp_path / "whole"), data_root=str(SLICE), groups=["blades"],
                               questions_per_group=2, decoding="constrained", max_new_tokens=4, device="cpu",
                               split="train", out=str(tmp_path / "eval")),
                    model=whole["model"].lm, tokenizer=tok, log=lambda *_: None)
    assert [r["advice_rate"] for r in rows if r["group"] == "average" and r["mode"] == "policy"] == [1.0]
    (tmp_path / "whole" / "model" / FILE_NAME).write_text("not tensors")
    with pytest.raises(ValueError, match="not a readable choice head"):
        load_choice_head(tmp_path / "whole" / "model")


@settings(max_examples=200, deadline=None)
# Margins a hundredth apart at least: two that differ in the last bit have no float strictly between them.
@given(st.lists(st.integers(-2000, 2000), min_size=1, max_size=40, unique=True).map(lambda xs: [x / 100 for x in xs]),
       st.floats(0, 1))
def test_shift_for_rate_makes_the_greedy_agent_ask_on_that_share(margins, rate):
    shift = shift_for_rate(margins, rate)
    asks = sum(m + shift > 0 for m in margins)
    assert asks == int(round(rate * len(margins)))


def test_ask_margins_read_the_choices_that_offered_advice():
    choices = [{"function_logprobs": {fn.SEEK_ADVICE: -0.5, fn.PREDICT_ANSWER: -1.5, fn.SEARCH_PRODUCT: -0.2}},
               {"function_logprobs": {fn.REFLECTION: -0.1}},
               {"function_logprobs": {fn.SEEK_ADVICE: -2.0, fn.PREDICT_ANSWER: -0.1}}]
    assert ask_margins(choices) == pytest.approx([-0.3, -1.9])
    with pytest.raises(ValueError, match="at least one choice"):
        shift_for_rate([], 0.5)


def test_an_ask_shift_moves_the_agent_advice_and_evaluation_records_its_margins(tmp_path):
    import json

    from agile.executor.agent_eval import ASK_MARGINS_FILE, EvalConfig, run_eval

    lm, tok = load_causal_lm("tiny", device="cpu", seed=0)

    def rate(shift, out):
        rows = run_eval(EvalConfig(model="tiny", data_root=str(SLICE), groups=["blades"], split="train",
                                   questions_per_group=4, decoding="constrained", max_new_tokens=4, device="cpu",
                                   ask_shift=shift, out=str(tmp_path / out)),
                        model=lm, tokenizer=tok, log=lambda *_: None)
        return next(r["advice_rate"] for r in rows if r["group"] == "average")

    assert rate(60.0, "up") == 1.0 and rate(-60.0, "down") == 0.0
    margins = json.loads((tmp_path / "down" / ASK_MARGINS_FILE).read_text())["full"]
    assert len(margins) >= 4 and max(margins) < -50  # the shift is in the recorded scores
    with pytest.raises(ValueError, match="decoding='constrained'"):
        run_eval(EvalConfig(model="tiny", data_root=str(SLICE), groups=["blades"], split="train", questions_per_group=1,
                            decoding="free", ask_shift=1.0, device="cpu", out=str(tmp_path / "free")),
                 model=lm, tokenizer=tok, log=lambda *_: None)


def test_the_projected_head_reads_whitened_principal_components_and_round_trips(tmp_path):
    from accelerate import Accelerator

    from agile.train.ppo import fit_head_standardiser

    g = torch.Generator().manual_seed(0)
    hidden, k = 12, 3
    # States with three strong directions and noise in the others.
    loadings = torch.randn(k, hidden, generator=g) * torch.tensor([[6.0], [3.0], [2.0]])
    states = torch.randn(200, k, generator=g) @ loadings + 0.1 * torch.randn(200, hidden, generator=g) + 5.0
    head = ChoiceHead(hidden, components=k)
    decisions = [Decision([1], [[2], [3]], 0, 0.0, state=s) for s in states]
    fit_head_standardiser(head, [ChoiceSample(decisions, 0.0)], Accelerator(cpu=True))
    projected = ((states - head.mean) / head.scale) @ head.basis.T
    assert projected.var(0).tolist() == pytest.approx([1.0] * k, abs=1e-3)
    assert torch.corrcoef(projected.T).sub(torch.eye(k)).abs().max() < 1e-3  # uncorrelated components
    with torch.no_grad():
        head.weight.copy_(torch.tensor([0.5, -1.0, 2.0]))
    want = head(states[:5])
    head.save(tmp_path)
    loaded = load_choice_head(tmp_path)
    assert loaded.basis.shape == (k, hidden) and loaded(states[:5]).tolist() == pytest.approx(want.tolist(), abs=1e-5)
    # A head saved before the projection existed (no basis) loads as one that reads the whole state.
    from safetensors.torch import save_file

    plain = ChoiceHead(hidden)
    plain.weight.data.fill_(0.25)
    (tmp_path / "old").mkdir()
    save_file({k: v for k, v in plain.state_dict().items() if k != "basis"}, tmp_path / "old" / FILE_NAME)
    old = load_choice_head(tmp_path / "old")
    assert len(old.basis) == 0 and old(states[:2]).tolist() == pytest.approx(plain(states[:2]).tolist())
    with pytest.raises(ValueError, match="more first-iteration choice states"):
        fit_head_standardiser(ChoiceHead(hidden, components=k), [ChoiceSample(decisions[:3], 0.0)],
                              Accelerator(cpu=True))
