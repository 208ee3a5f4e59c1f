"""Length-bucketed dynamic batching of rendered windows.

Windows are sorted by token length (longest first, so an out-of-memory shows at once) and packed
greedily while ``rows x longest row <= batch_tokens``: similar lengths share a batch, so little
compute goes to padding, and the batch grows when sequences are short.

Padding is on the RIGHT and position ids are explicit (0..len-1 per row): under a causal mask a
real token never attends to a pad that comes after it, so a padded row computes exactly what it
would alone, and no row's positions are shifted (left padding would shift them unless position
ids were rebuilt from the mask).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from prm.inputs.render import Window


@dataclass
class Batch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    rows: torch.Tensor
    """Batch row of every tag read in this batch."""
    cols: torch.Tensor
    """Token position of every tag read in this batch."""
    starts: torch.Tensor
    """Token position where each tag's step begins (the tag's own position where unknown)."""
    windows: list[Window]
    tokens: int
    """Real (unpadded) tokens in the batch."""


def pack(windows: Sequence[Window], batch_tokens: int) -> list[list[int]]:
    """Group window indices into batches of at most ``batch_tokens`` padded tokens each.

    A window longer than the budget still gets a batch of its own.
    """
    order = sorted(range(len(windows)), key=lambda i: len(windows[i].ids), reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = len(windows[i].ids)
        if current and (len(current) + 1) * max(longest, length) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


def collate(windows: Sequence[Window], pad_id: int, device: torch.device | str = "cpu") -> Batch:
    """Right-pad windows into tensors and list the (row, position) of every tag."""
    width = max(len(w.ids) for w in windows)
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(windows), width), dtype=torch.long)
    rows, cols, starts = [], [], []
    for r, window in enumerate(windows):
        n = len(window.ids)
        input_ids[r, :n] = torch.tensor(window.ids, dtype=torch.long)
        attention_mask[r, :n] = 1
        rows.extend([r] * len(window.tag_pos))
        cols.extend(window.tag_pos)
        starts.extend(window.step_start if window.step_start is not None else window.tag_pos)
    position_ids = torch.arange(width, dtype=torch.long).unsqueeze(0).expand(len(windows), -1)
    return Batch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.contiguous().to(device),
        rows=torch.tensor(rows, dtype=torch.long, device=device),
        cols=torch.tensor(cols, dtype=torch.long, device=device),
        starts=torch.tensor(starts, dtype=torch.long, device=device),
        windows=list(windows),
        tokens=int(attention_mask.sum()),
    )
