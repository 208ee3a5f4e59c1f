"""The AGILE agent: an LLM policy that writes one function line per turn, run over many executors.

``LLMPolicy`` generates the next turn for a batch of executors at once (left-padded prompts, one
``generate`` call per batch); a turn ends at the first newline after some text. It returns
the generated token ids themselves, so the executor's context and PPO's training sequences hold
the very ids that were sampled.

``run_executors`` is the rollout loop: while any episode is unfinished, ask the policy for a turn
of every unfinished executor and apply it. Any callable ``policy(executors) -> list[ids | text]``
works (the LLM, the gold imitation policy of ``agile.train.sft_data``).
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections.abc import Callable, Sequence

import torch

from agile.executor.executor import Executor

Policy = Callable[[Sequence[Executor]], list]
DECODINGS = ("free", "constrained")
"""How ``LLMPolicy`` writes a turn: token by token, or constrained to the allowed functions."""


class TurnEnd:
    """Where a turn ends: at the first newline that follows some text (blank lines do not end it).

    A turn is one non-empty line; a model that starts with a newline would otherwise hand in an
    empty turn. Token classes are precomputed once per tokenizer.
    """

    def __init__(self, tokenizer):
        self.eos = tokenizer.eos_token_id
        newline, blank, content_newline = [], [], []
        for i in range(len(tokenizer)):
            text = tokenizer.decode([i])
            if not text.strip():
                blank.append(i)
            if "\n" in text:
                newline.append(i)
                if text.split("\n", 1)[0].strip():
                    content_newline.append(i)  # e.g. "yes\n": text, then the line break
        self.newline = torch.tensor(newline)
        self.blank = torch.tensor(blank)
        self.content_newline = torch.tensor(content_newline)
        self._newline, self._blank = set(newline), set(blank)
        self._content_newline = set(content_newline)

    def cut(self, ids: list[int]) -> int:
        """Length of the turn in ``ids`` (everything when it never ends)."""
        seen_text = False
        for j, t in enumerate(ids):
            if t == self.eos or (t in self._newline and (seen_text or t in self._content_newline)):
                return j + 1
            seen_text = seen_text or t not in self._blank
        return len(ids)

    def criteria(self):
        """A ``transformers`` stopping criterion that finishes each row at its turn's end."""
        from transformers import StoppingCriteria

        end = self

        class _Stop(StoppingCriteria):
            def __init__(self):
                self.seen_text = None

            def __call__(self, input_ids, scores, **kwargs):
                last = input_ids[:, -1].cpu()
                if self.seen_text is None:
                    self.seen_text = torch.zeros(len(last), dtype=torch.bool)
                done = torch.isin(last, end.newline) & (self.seen_text | torch.isin(last, end.content_newline))
                self.seen_text |= ~torch.isin(last, end.blank)
                return done.to(input_ids.device)

        return _Stop()


class LLMPolicy:
    """Batched turn generation with a causal LM (sampling for rollouts, greedy for evaluation).

    With ``seed`` set, torch's global generator is reseeded before each generate call (from the
    seed and the tokens generated so far), so a run of the same calls samples the same turns.
    ``generated_tokens``, ``prompt_tokens`` and ``seconds`` add up over calls (throughput).

    ``memo=True`` (greedy only, for a model whose weights no longer change) answers a prompt seen
    before with the turn it got then: a sweep replays the same sessions under every method and
    budget, and their contexts agree up to the first decision that differs. ``memo_hits`` counts
    the turns answered so.

    ``decoding="constrained"`` chooses each turn's function and answer form by the model's
    log-probabilities among what the executor allows (``agile.executor.constrained``): an untuned
    model then acts sensibly without SFT. Greedy, it takes the most probable function; sampling
    (``greedy=False``, PPO's rollouts) draws it over the allowed ones (``last_decisions`` records each
    draw for ``agile.train.choices``). ``"free"`` (the default) lets it write the turn token by
    token, as SFT and free-decoding PPO train it.
    """

    def __init__(self, model, tokenizer, max_new_tokens: int = 96, greedy: bool = False,
                 temperature: float = 1.0, batch_size: int = 8, seed: int | None = None,
                 memo: bool = False, decoding: str = "free", consistency_samples: int = 0,
                 consistency_seed: int = 0, choice_head=None):
        if memo and not greedy:
            raise ValueError("memo=True needs greedy=True: a sampled turn is a new draw each time.")
        if decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {', '.join(DECODINGS)}, got {decoding!r}.")
        if consistency_samples and decoding != "constrained":
            raise ValueError(f"consistency_samples={consistency_samples} needs decoding='constrained' (the samples "
                             "are drawn from its log-probabilities); leave it at 0.")
        if choice_head is not None and decoding != "constrained":
            raise ValueError("a choice head moves the constrained policy's function scores: it needs "
                             "decoding='constrained'.")
        from transformers import GenerationConfig

        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.turn_end = TurnEnd(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else tokenizer.eos_token_id
        # A fresh config: the model's own defaults (top_k=50, repetition penalty, ...) would make
        # the sampling distribution differ from the softmax that PPO's ratio is computed with.
        self.generation_config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=not greedy,
            temperature=temperature if not greedy else None, top_k=0 if not greedy else None,
            top_p=1.0 if not greedy else None, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=self.pad_id)
        self.seed = seed
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.seconds = 0.0
        self._memo: dict[bytes, object] | None = {} if memo else None  # a turn, or (turn, choice) when constrained
        self.memo_hits = 0
        self.last_decisions: list[dict | None] = []
        """Per turn of the last call: the sampled function choice (constrained, ``greedy=False``), else None."""
        self.last_signals: list[dict[str, float]] = []
        """Per turn of the last call: what the turn's choice says of itself (constrained decoding's
        margins, ``agile.executor.constrained``; empty dicts for free decoding)."""
        self.decoding = decoding
        self.constrained = None
        if decoding == "constrained":
            from agile.executor.constrained import ConstrainedDecoder

            self.constrained = ConstrainedDecoder(model, tokenizer, max_new_tokens, samples=consistency_samples,
                                                  seed=consistency_seed if greedy else (seed or 0),
                                                  sample_functions=not greedy)
            self.constrained.choice_head = choice_head

    def __call__(self, executors: Sequence[Executor]) -> list[list[int]]:
        if self.constrained is not None:
            start = time.perf_counter()
            turns, recent = self._constrained_turns(executors)
            self.last_signals = [dict(c.get("signals", {})) for c in recent]
            self.last_decisions = [c.pop("decision", None) for c in recent]
            self.seconds += time.perf_counter() - start
            self.generated_tokens += sum(map(len, turns))
            self.prompt_tokens += sum(len(e.prompt_ids()) for e in executors)
            return turns
        turns = self.generate([e.prompt_ids() for e in executors])
        self.last_signals = [{} for _ in turns]
        self.last_decisions = [None for _ in turns]
        return turns

    def weights_changed(self) -> None:
        """Forget what the old weights computed (memoised turns, cached prompt keys and values)."""
        if self._memo is not None:
            self._memo.clear()
        if self.constrained is not None:
            self.constrained.cache.clear()

    def _constrained_turns(self, executors: Sequence[Executor]) -> tuple[list[list[int]], list[dict]]:
        """One constrained turn per executor and its choice record, the turns not memoised written together
        (one batched call of the decoder). Memoised like ``generate``: a constrained turn is fixed by the
        prompt, the functions allowed and the table queried (the choice record is repeated on a hit)."""
        decoder = self.constrained
        keys = [None] * len(executors) if self._memo is None else [
            _prompt_key(e.prompt_ids()) + repr((e.allowed(), e.db.table)).encode() for e in executors]
        missing = [i for i, k in enumerate(keys) if k is None or k not in self._memo]
        # Identical prompts within the call are written once.
        first: dict[bytes, int] = {}
        run = [i for i in missing if keys[i] is None or first.setdefault(keys[i], i) == i]
        written = decoder([executors[i] for i in run]) if run else []
        fresh = decoder.choices[len(decoder.choices) - len(run):] if run else []
        del decoder.choices[len(decoder.choices) - len(run):]
        by_index = {i: (turn, choice) for i, turn, choice in zip(run, written, fresh)}
        turns, choices = [], []
        for i, key in enumerate(keys):
            if i in by_index:
                turn, choice = by_index[i]
                if key is not None:
                    self._memo[key] = (turn, choice)
            else:
                turn, choice = self._memo[key] if key in self._memo else by_index[first[key]]
                self.memo_hits += 1
                choice = dict(choice)
            turns.append(list(turn))
            choices.append(choice)
        decoder.choices.extend(choices)
        return turns, choices

    def generate(self, prompts: list[list[int]]) -> list[list[int]]:
        """One turn for each prompt (lists of ids); returns the new ids up to the stop token."""
        if self._memo is None:
            return self._generate(prompts)
        keys = [_prompt_key(p) for p in prompts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._memo))
        first = {k: i for i, k in reversed(list(enumerate(keys)))}
        for key, turn in zip(missing, self._generate([prompts[first[k]] for k in missing])):
            self._memo[key] = turn
        self.memo_hits += len(keys) - len(missing)
        return [list(self._memo[k]) for k in keys]

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]]) -> list[list[int]]:
        if not prompts:
            return []
        start = time.perf_counter()
        device = next(self.model.parameters()).device
        # Similar lengths together waste less padding.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[list[int]] = [[] for _ in prompts]
        for begin in range(0, len(order), self.batch_size):
            rows = order[begin:begin + self.batch_size]
            width = max(len(prompts[i]) for i in rows)
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, width - len(prompts[i]):] = torch.tensor(prompts[i])
                mask[r, width - len(prompts[i]):] = 1
            if self.seed is not None:
                torch.manual_seed(self.seed + self.generated_tokens)
            generated = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                            generation_config=self.generation_config,
                                            stopping_criteria=[self.turn_end.criteria()])
            for r, i in enumerate(rows):
                new = generated[r, width:].tolist()
                cut = self.turn_end.cut(new)
                out[i] = new[:cut]
                self.generated_tokens += cut
                self.prompt_tokens += len(prompts[i])
        self.seconds += time.perf_counter() - start
        return out


def _prompt_key(ids: list[int]) -> bytes:
    # A digest, not the ids: prompts run to thousands of tokens and a sweep sees tens of thousands.
    return hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()


def run_executors(executors: Sequence[Executor], policy: Policy) -> None:
    """Drive every executor until its episode (or its allowed sessions) is done."""
    while True:
        active = [e for e in executors if not e.done]
        if not active:
            return
        actions = policy(active)
        if len(actions) != len(active):
            raise ValueError(f"the policy returned {len(actions)} turns for {len(active)} executors; "
                             "it must return one per executor, in order.")
        for executor, action in zip(active, actions):
            executor.act(action)


def pad_batch(samples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``(input_ids, action_mask)`` pairs into ``input_ids``, ``attention_mask`` and
    ``action_mask`` tensors of shape [B, T]."""
    width = max(len(ids) for ids, _ in samples)
    out = {k: torch.zeros((len(samples), width), dtype=torch.long)
           for k in ("input_ids", "attention_mask", "action_mask")}
    out["input_ids"].fill_(pad_id)
    for row, (ids, mask) in enumerate(samples):
        if len(ids) != len(mask):
            raise ValueError(f"sample {row}: {len(ids)} ids but {len(mask)} mask entries")
        out["input_ids"][row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        out["attention_mask"][row, :len(ids)] = 1
        out["action_mask"][row, :len(ids)] = torch.tensor(mask, dtype=torch.long)
    out["action_mask"][:, 0] = 0  # the first token has no context to be predicted from
    return out


class ActionLM(torch.nn.Module):
    """A causal LM (optionally LoRA-wrapped) that scores its action tokens, plus a value head.

    ``forward`` returns ``logp`` [B, T]: ``log pi(x_t | x_<t)`` on action tokens and 0 elsewhere,
    and, with a value head, ``values`` [B, T]: the critic's estimate at the state in which action
    token t was chosen (0 elsewhere). Only action positions go through the LM head, which skips
    most of a [T, vocab] logits tensor and makes "the loss sees action tokens only" structural.
    Being one module, it is what distributed training wraps (gradients of LoRA weights and the
    value head are averaged across processes).
    """

    def __init__(self, lm, value_head: bool = False):
        super().__init__()
        self.lm = lm
        hf = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
        self.hidden_size = hf.config.hidden_size
        self.value = torch.nn.Linear(self.hidden_size, 1) if value_head else None
        self.choice_head = None
        """A ``ChoiceHead`` trained with the constrained choice (``PPOConfig.choice_head``), else None."""
        if self.value is not None:
            # A zero-initialised critic starts at V = 0: no early bias in the advantages.
            torch.nn.init.zeros_(self.value.weight)
            torch.nn.init.zeros_(self.value.bias)

    def _parts(self):
        hf = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm
        return getattr(hf, hf.base_model_prefix), hf.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                action_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        backbone, head = self._parts()
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        # Position t-1 predicts token t: select the states that choose an action token.
        chooses = action_mask[:, 1:].bool()
        states = hidden[:, :-1][chooses]                      # [N, H]
        targets = input_ids[:, 1:][chooses]                   # [N]
        logits = head(states).float()
        token_logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        logp = torch.zeros(input_ids.shape, dtype=token_logp.dtype, device=input_ids.device)
        logp[:, 1:] = logp[:, 1:].masked_scatter(chooses, token_logp)
        out = {"logp": logp}
        if self.value is not None:
            v = self.value(states.to(self.value.weight.dtype)).squeeze(-1).float()
            values = torch.zeros(input_ids.shape, dtype=v.dtype, device=input_ids.device)
            values[:, 1:] = values[:, 1:].masked_scatter(chooses, v)
            out["values"] = values
        return out
