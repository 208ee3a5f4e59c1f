"""Key/value caches of recent prompts, reused by later prompts that start the same way.

    cache = PromptKVCache(model, max_tokens=16_384)
    logits, kv = cache.prefill(token_ids)          # runs only the tokens after the longest cached prefix
    continuations = greedy_continue(model, [(logits, kv), ...], stops, eos_ids, max_new_tokens=48)
    scores = score_continuations(model, logits, kv, [[id, ...], ...])   # log p of each candidate

On a CPU, prompt tokens are most of an LLM agent's time (each one costs a full forward pass of
the model). Many prompts share a long start: every session of a group opens with the same system text
and table schema, and each choice of a constrained turn (a query's next unit, an answer line) extends
the prompt before it. ``prefill`` looks up the cached prompt with the longest common *token* prefix
(so the model sees exactly the tokens it would see without the cache), reuses its keys and values
for that prefix and runs only the rest. The result equals a full forward pass up to float
rounding. Entries are kept in least-recently-used order, bounded by their total tokens
(``kv_bytes_per_token``: 46 KB for SmolLM2-135M in float32).

``prefill_many`` prefills the prompts of a lockstep round in batched forwards, each reusing its own
cached prefix (``agile.agents.batch_forward``); a start that several of them share but the cache does
not hold yet runs once first, as the first of them would leave it for the others one at a time.

``greedy_continue`` decodes many prefilled rows together: their caches are left-padded into one
batch (decode steps are bound by reading the weights, so a batch costs little more than one row),
a row leaves the batch as soon as it emits a stop or end token, and nothing after that is computed
(``prefilled_tokens`` counts the prompt tokens that ran through the model).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from agile.agents.batch_forward import MAX_BATCH_BYTES, chunks, kv_bytes_per_token, prefill_rows
from agile.models import cache_arg, returned_cache

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer ``(keys, values)``, each ``[1, kv_heads, tokens, head_dim]``."""
SHARED_START_TOKENS = 16
"""A start shared by prompts of one ``prefill_many`` call gets its own pass from this many uncached tokens."""


class PromptKVCache:
    """An LRU of prompt key/value caches keyed by token ids; see the module docstring."""

    def __init__(self, model, max_tokens: int = 16_384):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}.")
        self.model = model
        self.max_tokens = int(max_tokens)
        self._entries: OrderedDict[int, tuple[torch.Tensor, KV]] = OrderedDict()
        self._next_key = 0
        self.tokens = 0
        """Tokens held by the cached entries (never above ``max_tokens``)."""
        self.prompts = 0
        """Prompts prefilled."""
        self.hits = 0
        """Prompts that reused a cached prefix."""
        self.prompt_tokens = 0
        self.reused_tokens = 0
        self.prefilled_tokens = 0
        """Prompt tokens run through the model (the others came from the cache)."""
        self.start_tokens = 0
        """Tokens of starts shared within a batched call, run on their own first (``prefill_many``): they
        count as reused by the prompts that share them."""

    def __len__(self) -> int:
        return len(self._entries)

    def _longest(self, ids: torch.Tensor) -> tuple[int, int | None]:
        """Length of the longest common token prefix with a cached prompt, and that entry's key."""
        best, best_key = 0, None
        for key, (stored, _) in self._entries.items():
            n = min(len(stored), len(ids))
            if n <= best:
                continue
            equal = stored[:n] == ids[:n]
            common = n if bool(equal.all()) else int(equal.to(torch.int8).argmin())
            if common > best:
                best, best_key = common, key
        return best, best_key

    @torch.no_grad()
    def prefill(self, ids: Sequence[int]) -> tuple[torch.Tensor, KV]:
        """Logits after the last token of ``ids`` (float32) and the prompt's keys and values;
        the prompt is cached for later prompts."""
        if not ids:
            raise ValueError("prefill needs at least one token.")
        device = self.model.device
        tokens = torch.tensor(list(ids), dtype=torch.long)
        common, key = self._longest(tokens)
        reuse = min(common, len(tokens) - 1)  # at least one token runs: its logits are the output
        cache = DynamicCache(config=self.model.config)
        if reuse > 0:
            self._entries.move_to_end(key)
            for layer, (k, v) in enumerate(self._entries[key][1]):
                # Slices are views; the cache's update concatenates into new tensors, so the
                # stored entry is never written to.
                cache.update(k[:, :, :reuse], v[:, :, :reuse], layer)
            self.hits += 1
            self.reused_tokens += reuse
        self.prompts += 1
        self.prompt_tokens += len(tokens)
        self.prefilled_tokens += len(tokens) - reuse
        output = self.model(input_ids=tokens[reuse:].unsqueeze(0).to(device), **cache_arg(self.model, cache),
                            use_cache=True, logits_to_keep=1)
        kv = [(layer.keys, layer.values) for layer in returned_cache(output).layers]
        # A prompt that extends a cached one serves every lookup that one served: replace it.
        extends = key is not None and common == len(self._entries[key][0])
        self._store(tokens, kv, superseded=key if extends else None)
        return output.logits[0, -1].float(), kv

    @torch.no_grad()
    def prefill_many(self, prompts: Sequence[Sequence[int]], max_bytes: int = MAX_BATCH_BYTES,
                     _counted: bool = True) -> list[tuple[torch.Tensor, KV]]:
        """``prefill`` of every prompt, in batched forwards (``agile.agents.batch_forward``): each
        prompt reuses its longest cached prefix; prompts whose starts are shared with another prompt of
        the call but not cached yet get that start prefilled first (as the first of them would leave it
        for the others, one at a time); identical prompts run once."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("prefill needs at least one token.")
        if len(prompts) == 1 and _counted:
            return [self.prefill(prompts[0])]
        unique = list(dict.fromkeys(tuple(p) for p in prompts))
        self._prefill_shared_starts(unique, max_bytes)
        if not _counted:  # a start already cached whole (another start's own start) needs no pass
            unique = [p for p in unique if self._longest(torch.tensor(p, dtype=torch.long))[0] < len(p)]
            if not unique:
                return []
        tokens = [torch.tensor(p, dtype=torch.long) for p in unique]
        plans = []
        for t in tokens:
            common, key = self._longest(t)
            plans.append((common, key, min(common, len(t) - 1)))
        results: list[tuple[torch.Tensor, KV] | None] = [None] * len(unique)
        sizes = [(reuse, len(t) - reuse) for t, (_, _, reuse) in zip(tokens, plans)]
        for group in chunks(sizes, max(1, max_bytes // kv_bytes_per_token(self.model))):
            pasts = [self._past(plans[i][1], plans[i][2]) for i in group]
            outputs = prefill_rows(self.model, pasts, [unique[i][plans[i][2]:] for i in group])
            for i, output in zip(group, outputs):
                results[i] = output
        # Stored only now: a store may evict an entry that a later group's plan reads from.
        for t, (common, key, reuse), (_, kv) in zip(tokens, plans, results):
            if not _counted:  # a shared start is work done, not a prompt asked for
                self.start_tokens += len(t) - reuse
            else:
                self.prefilled_tokens += len(t) - reuse
                self.prompts += 1
                self.prompt_tokens += len(t)
                if reuse > 0:
                    self.hits += 1
                    self.reused_tokens += reuse
            extends = key is not None and key in self._entries and common == len(self._entries[key][0])
            self._store(t, kv, superseded=key if extends else None)
        if not _counted:
            return []
        repeats = len(prompts) - len(unique)
        if _counted and repeats:  # a prompt asked for twice in the call is served by one computation
            counts: dict[tuple, int] = {}
            for p in prompts:
                key = tuple(p)
                if counts.get(key):
                    self.prompts += 1
                    self.hits += 1
                    self.prompt_tokens += len(key)
                    self.reused_tokens += len(key)
                counts[key] = counts.get(key, 0) + 1
        by_prompt = dict(zip(unique, results))
        return [by_prompt[tuple(p)] for p in prompts]

    def _past(self, key: int | None, reuse: int) -> KV | None:
        if key is None or reuse == 0:
            return None
        self._entries.move_to_end(key)
        return [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in self._entries[key][1]]

    def _prefill_shared_starts(self, prompts: list[tuple[int, ...]], max_bytes: int) -> None:
        """Prefill (and cache) the starts that two or more ``prompts`` share beyond what the cache holds,
        where they are long enough to be worth a pass of their own."""
        order = sorted(prompts)
        shared = [0] * len(order)
        for i in range(len(order) - 1):
            n = _common_prefix(order[i], order[i + 1])
            shared[i], shared[i + 1] = max(shared[i], n), max(shared[i + 1], n)
        starts = []
        for prompt, n in zip(order, shared):
            if n < SHARED_START_TOKENS or n > self.max_tokens:  # too short to pay, or too long to keep
                continue
            common, _ = self._longest(torch.tensor(prompt[:n], dtype=torch.long))
            if n - common >= SHARED_START_TOKENS:
                starts.append(prompt[:n])
        if starts:
            self.prefill_many(list(dict.fromkeys(starts)), max_bytes, _counted=False)

    def _store(self, tokens: torch.Tensor, kv: KV, superseded: int | None) -> None:
        if superseded is not None:
            stored, _ = self._entries.pop(superseded)
            self.tokens -= len(stored)
        if len(tokens) > self.max_tokens:
            return
        self._entries[self._next_key] = (tokens, kv)
        self._next_key += 1
        self.tokens += len(tokens)
        while self.tokens > self.max_tokens:
            stored, _ = self._entries.popitem(last=False)[1]
            self.tokens -= len(stored)

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _greedy(logits: torch.Tensor) -> list[int]:
    return logits.argmax(-1).tolist()


@torch.no_grad()
def greedy_continue(
    model,
    rows: Sequence[tuple[torch.Tensor, KV]],
    stops: Sequence[set[int]],
    eos_ids: set[int],
    max_new_tokens: int,
    with_log_probs: bool = False,
    pick=_greedy,
    floors: Sequence[float] | None = None,
):
    """Greedy continuations of prefilled rows ``(last logits, kv)``, as ``generate`` would give.

    A row ends after a token of its ``stops`` (kept in the output) or of ``eos_ids`` (dropped), or
    after ``max_new_tokens`` tokens. ``with_log_probs``: also the log-probability of every token
    the model chose, the dropped end token included (the agent's confidence signals). ``pick``:
    the next token of each row from its logits ``[rows, vocab]`` (default: the argmax).

    ``floors`` (greedy only, not with ``with_log_probs``): per row a log-probability under which its
    continuation stops being of use. A row whose kept tokens' log-probabilities add up to less than its
    floor before it ends leaves the batch then (a longer line can only be less probable); the call then
    returns ``(outputs, cut)``, ``cut[i]`` true where row ``i`` left so.
    """
    device = model.device
    outputs: list[list[int]] = [[] for _ in rows]
    log_probs: list[list[float]] = [[] for _ in rows]
    cut = [False] * len(rows)
    if floors is not None:
        if with_log_probs:
            raise ValueError("floors and with_log_probs do not go together.")
        done = (outputs, cut)
    else:
        done = (outputs, log_probs) if with_log_probs else outputs
    if not rows or max_new_tokens < 1:
        return done
    need_log_probs = with_log_probs or floors is not None
    running = [0.0] * len(rows)

    def below_floor(i: int, log_prob: float) -> bool:
        if floors is None:
            return False
        running[i] += log_prob
        cut[i] = running[i] < floors[i]
        return cut[i]

    lengths = [kv[0][0].shape[-2] for _, kv in rows]
    longest = max(lengths)
    # One left-padded batch cache; padded slots are masked out.
    layers = []
    for layer in range(len(rows[0][1])):
        parts_k, parts_v = [], []
        for (_, kv), length in zip(rows, lengths):
            k, v = kv[layer]
            pad = longest - length
            if pad:
                k = torch.cat([k.new_zeros(*k.shape[:2], pad, k.shape[-1]), k], dim=-2)
                v = torch.cat([v.new_zeros(*v.shape[:2], pad, v.shape[-1]), v], dim=-2)
            parts_k.append(k)
            parts_v.append(v)
        layers.append((torch.cat(parts_k), torch.cat(parts_v)))
    mask = torch.zeros(len(rows), longest, dtype=torch.long, device=device)
    for i, length in enumerate(lengths):
        mask[i, longest - length:] = 1
    positions = torch.tensor(lengths, dtype=torch.long, device=device)
    alive: list[int] = []
    last: list[int] = []
    firsts = pick(torch.stack([logits for logits, _ in rows]))
    for i, ((logits, _), token) in enumerate(zip(rows, firsts)):
        log_prob = float(torch.log_softmax(logits.float(), -1)[token]) if need_log_probs else 0.0
        if with_log_probs:
            log_probs[i].append(log_prob)
        if token in eos_ids:
            continue
        outputs[i].append(token)
        if token not in stops[i] and max_new_tokens > 1 and not below_floor(i, log_prob):
            alive.append(i)
            last.append(token)
    if not alive:
        return done
    keep = torch.tensor(alive, device=device)
    cache = DynamicCache(config=model.config)
    for layer, (k, v) in enumerate(layers):
        cache.update(k.index_select(0, keep), v.index_select(0, keep), layer)
    mask = mask.index_select(0, keep)
    positions = positions.index_select(0, keep)
    for step in range(1, max_new_tokens):
        mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
        output = model(input_ids=torch.tensor(last, device=device).unsqueeze(1), attention_mask=mask,
                       position_ids=positions.unsqueeze(1), **cache_arg(model, cache), use_cache=True)
        cache = returned_cache(output)
        tokens = pick(output.logits[:, -1])
        if need_log_probs:
            chosen = torch.log_softmax(output.logits[:, -1].float(), -1).gather(
                1, torch.tensor(tokens, device=device).unsqueeze(1))[:, 0].tolist()
        positions = positions + 1
        still, last = [], []
        for slot, (i, token) in enumerate(zip(alive, tokens)):
            if with_log_probs:
                log_probs[i].append(chosen[slot])
            if token in eos_ids:
                continue
            outputs[i].append(token)
            if token not in stops[i] and step + 1 < max_new_tokens and \
                    not below_floor(i, chosen[slot] if need_log_probs else 0.0):
                still.append(slot)
                last.append(token)
        if not still:
            break
        if len(still) < len(alive):  # finished rows leave the batch: no compute spent on them
            cache.batch_select_indices(torch.tensor(still, device=device))
            index = torch.tensor(still, device=device)
            mask, positions = mask.index_select(0, index), positions.index_select(0, index)
        alive = [alive[slot] for slot in still]
    return done


@torch.no_grad()
def score_continuations(model, first_logits: torch.Tensor, kv: KV, lines: list[list[int]]) -> list[float]:
    """Log-probability of each token sequence in ``lines`` as the continuation of a prefilled prompt
    (its last logits and keys/values, as ``PromptKVCache.prefill`` returns them): one batched
    forward pass over the candidates, the prompt's keys and values shared."""
    first = torch.log_softmax(first_logits.float(), -1)
    scores = [float(first[line[0]]) for line in lines]
    longest = max(len(line) for line in lines)
    if longest < 2:
        return scores
    device = model.device
    # Right padding: a causal model's positions before the padding never see it.
    inputs = torch.tensor([line[:-1] + [line[-1]] * (longest - len(line)) for line in lines],
                          dtype=torch.long, device=device)[:, :longest - 1]
    cache = DynamicCache(config=model.config)
    for layer, (k, v) in enumerate(kv):
        cache.update(k.expand(len(lines), *k.shape[1:]).contiguous(),
                     v.expand(len(lines), *v.shape[1:]).contiguous(), layer)
    past = kv[0][0].shape[-2]
    positions = torch.arange(past, past + longest - 1, device=device).expand(len(lines), -1)
    output = model(input_ids=inputs, position_ids=positions, **cache_arg(model, cache), use_cache=True)
    log_probs = torch.log_softmax(output.logits.float(), -1)
    for row, line in enumerate(lines):
        for j in range(1, len(line)):
            scores[row] += float(log_probs[row, j - 1, line[j]])
    return scores
