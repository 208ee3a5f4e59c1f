"""Forward passes over many prompts at once, each with its own cached past.

    cache = left_padded_cache(model, [kv_a, kv_b, ...])      # one batch cache, pasts right-aligned
    scores = score_many(model, [(logits, kv, lines), ...])   # log p of each row's candidate lines

Decoding on a CPU at batch one is bound by reading the weights: a forward of 8 short rows costs
little more than one. The constrained agent's turns are many short forwards (a query's next unit,
an answer line, a function name), each after a long prompt whose keys and values are cached, so
they are batched across the episodes of a lockstep round. Every row keeps its own past: the pasts
are left-padded to the longest (padded slots masked out) and each row's new tokens carry their own
positions, so a row sees exactly the tokens it would see alone.

``score_many`` packs each row's candidate lines into one sequence after its past, with a mask that
lets a line's tokens see the past and the earlier tokens of the same line only (tree attention):
the past is held once per row, not once per candidate. Results equal scoring each row alone up to
float rounding (batched matrix products may sum in another order).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from agile.models import cache_arg, returned_cache

MAX_BATCH_BYTES = 1 << 30
"""Bound on the keys and values (padded past + new tokens) and on the logits one batched forward holds."""


def kv_bytes_per_token(model) -> int:
    """Bytes of keys and values one token takes in ``model``'s cache (all layers)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    element = torch.finfo(model.dtype).bits // 8
    return 2 * config.num_hidden_layers * kv_heads * head_dim * element


def left_padded_cache(model, pasts: Sequence, width: int) -> DynamicCache:
    """A batch cache of ``pasts`` (per row, per layer ``(keys, values)`` of shape ``[1, heads, t, dim]``,
    or None for no past), each right-aligned in ``width`` slots; the slots before a row's past are
    zeros that its attention mask hides."""
    cache = DynamicCache(config=model.config)
    if width == 0:
        return cache
    template = next(p for p in pasts if p is not None)
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros(len(pasts), k0.shape[1], width, k0.shape[-1])
        values = v0.new_zeros(len(pasts), v0.shape[1], width, v0.shape[-1])
        for row, past in enumerate(pasts):
            if past is None:
                continue
            k, v = past[layer]
            length = k.shape[-2]
            if length:
                keys[row, :, width - length:] = k[0]
                values[row, :, width - length:] = v[0]
        cache.update(keys, values, layer)
    return cache


def past_length(past) -> int:
    return 0 if past is None else past[0][0].shape[-2]


def chunks(sizes: Sequence[tuple[int, int]], limit_tokens: int, spread: float = 1.25, slack: int = 8) -> list[list[int]]:
    """Rows grouped for batched forwards. ``sizes``: per row ``(past, new)`` tokens. Rows are taken in
    order of new tokens; a group's new-token counts stay within ``spread`` x the smallest plus ``slack``
    (padding wastes little compute) and its padded size within ``limit_tokens`` (memory)."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i][1])
    groups: list[list[int]] = []
    for i in order:
        past, new = sizes[i]
        if groups:
            group = groups[-1]
            smallest = sizes[group[0]][1]
            width = max(max(sizes[j][0] for j in group), past) + new
            if new <= spread * smallest + slack and width * (len(group) + 1) <= limit_tokens:
                group.append(i)
                continue
        groups.append([i])
    return groups


@torch.no_grad()
def score_many(model, requests: Sequence[tuple[torch.Tensor, object, list[list[int]]]],
               max_bytes: int = MAX_BATCH_BYTES) -> list[list[float]]:
    """Log-probability of each candidate line after each row's prompt. ``requests``: per row the
    prompt's last logits, its keys and values (as ``PromptKVCache.prefill`` returns them) and the
    candidate lines (token ids). One packed forward per group of rows (see the module docstring)."""
    out: list[list[float]] = []
    for logits, _, lines in requests:
        first = torch.log_softmax(logits.float(), -1)
        out.append([float(first[line[0]]) for line in lines])
    packed = [sum(len(line) - 1 for line in lines) for _, _, lines in requests]
    rows = [i for i, n in enumerate(packed) if n > 0]
    if not rows:
        return out
    vocab = model.config.get_text_config().vocab_size if hasattr(model.config, "get_text_config") \
        else model.config.vocab_size
    per_token = max(kv_bytes_per_token(model), 4 * vocab)  # keys and values, or a float32 row of logits
    sizes = [(past_length(requests[i][1]), packed[i]) for i in rows]
    for group in chunks(sizes, max(1, max_bytes // per_token)):
        _score_group(model, [rows[g] for g in group], requests, out)
    return out


def _score_group(model, rows: list[int], requests, out: list[list[float]]) -> None:
    device = model.device
    pasts = [requests[i][1] for i in rows]
    lengths = [past_length(p) for p in pasts]
    width = max(lengths)
    tokens, positions, line_of, targets = [], [], [], []
    for i, length in zip(rows, lengths):
        t, p, l, g = [], [], [], []
        for n, line in enumerate(requests[i][2]):
            for j in range(len(line) - 1):
                t.append(line[j])
                p.append(length + j)
                l.append(n)
                g.append(line[j + 1])
        tokens.append(t), positions.append(p), line_of.append(l), targets.append(g)
    span = max(map(len, tokens))
    batch = len(rows)
    dtype = model.dtype
    blocked = torch.finfo(dtype).min
    mask = torch.full((batch, 1, span, width + span), blocked, dtype=dtype)
    ids = torch.zeros(batch, span, dtype=torch.long)
    pos = torch.zeros(batch, span, dtype=torch.long)
    for r, (t, p, l, length) in enumerate(zip(tokens, positions, line_of, lengths)):
        n = len(t)
        ids[r, :n] = torch.tensor(t)
        pos[r, :n] = torch.tensor(p)
        pos[r, n:] = p[-1] if p else length
        mask[r, 0, :n, width - length:width] = 0
        line = torch.tensor(l)
        offset = torch.tensor(p) - length
        # A packed token sees the earlier tokens of its own line (and itself).
        same = (line[:, None] == line[None, :]) & (offset[None, :] <= offset[:, None])
        mask[r, 0, :n, width:width + n] = torch.where(same, 0.0, blocked).to(dtype)
        for a in range(n, span):  # padding queries see themselves only (no row fully masked)
            mask[r, 0, a, width + a] = 0
    cache = left_padded_cache(model, pasts, width)
    output = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                   **cache_arg(model, cache), use_cache=True)
    log_probs = torch.log_softmax(output.logits.float(), -1)
    for r, i in enumerate(rows):
        n = len(tokens[r])
        chosen = log_probs[r, torch.arange(n), torch.tensor(targets[r], device=log_probs.device)].tolist()
        for line, value in zip(line_of[r], chosen):
            out[i][line] += value


@torch.no_grad()
def prefill_rows(model, pasts: Sequence, suffixes: Sequence[list[int]]):
    """One forward of each row's ``suffix`` after its ``past`` (per layer keys/values, or None):
    per row the logits after its last token (float32) and the keys and values of past + suffix
    (fresh tensors, not views of the batch)."""
    device = model.device
    lengths = [past_length(p) for p in pasts]
    width = max(lengths)
    span = max(map(len, suffixes))
    batch = len(suffixes)
    ids = torch.zeros(batch, span, dtype=torch.long)
    mask = torch.zeros(batch, width + span, dtype=torch.long)
    pos = torch.zeros(batch, span, dtype=torch.long)
    for r, (suffix, length) in enumerate(zip(suffixes, lengths)):
        n = len(suffix)
        ids[r, :n] = torch.tensor(suffix)
        ids[r, n:] = suffix[-1]  # right padding: a causal model's real positions never see it
        mask[r, width - length:width + n] = 1
        pos[r] = torch.arange(length, length + span)
    lasts = sorted({len(s) - 1 for s in suffixes})
    cache = left_padded_cache(model, pasts, width)
    output = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                   **cache_arg(model, cache), use_cache=True,
                   logits_to_keep=torch.tensor(lasts, device=device))
    layers = returned_cache(output).layers
    results = []
    for r, (suffix, length) in enumerate(zip(suffixes, lengths)):
        logits = output.logits[r, lasts.index(len(suffix) - 1)].float()
        start, stop = width - length, width + len(suffix)
        kv = [(layer.keys[r:r + 1, :, start:stop].clone(), layer.values[r:r + 1, :, start:stop].clone())
              for layer in layers]
        results.append((logits, kv))
    return results
