"""Equal work for every process of an ``accelerate`` run.

Every optimizer step all-reduces the gradients, so a process that takes one more step than its
peers waits forever for them. SFT and PPO therefore agree on their step counts before training:

- ``equal_share`` gives each process the same number of items by dropping the uneven tail (the
  last ``len(items) % processes`` items; at most ``processes - 1`` of them, said in the log);
- ``fewest`` is the smallest of a count over all processes (an all-reduced minimum), for counts
  that each process finds on its own (PPO's sessions per iteration); a process with more items
  uses a random subset of that size.

Tails are dropped, not padded: padding would repeat samples and weight them twice.
"""

from __future__ import annotations

import torch


def fewest(count: int, accelerator) -> int:
    """The smallest ``count`` over all processes (``count`` itself in a single process)."""
    if accelerator is None or accelerator.num_processes == 1:
        return count
    counts = accelerator.gather(torch.tensor([count], dtype=torch.long, device=accelerator.device))
    return int(counts.min())


def equal_share(items: list, accelerator) -> tuple[list, int]:
    """``(this process's items, items dropped)``: every process gets ``len(items) // processes``."""
    world = 1 if accelerator is None else accelerator.num_processes
    rank = 0 if accelerator is None else accelerator.process_index
    usable = len(items) - len(items) % world
    if items and usable == 0:
        raise ValueError(f"{len(items)} training samples cannot be shared by {world} processes; "
                         f"use at least {world} samples or fewer processes.")
    return items[:usable][rank::world], len(items) - usable
