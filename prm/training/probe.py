"""The frozen probe: a head fitted on cached backbone features, its L2 penalty chosen by cross-validation.

``prm train`` fits the head this way on a frozen backbone; ``prm.training.finetune`` starts each fine-tuned
copy's value head from the same probe.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import torch


L2_GRID = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
"""Penalties tried by cross-validation; the loss is a mean over rows, so 1.0 is very strong."""

ONE_THREAD_ELEMENTS = 1 << 20
"""Feature matrices up to this many elements are fitted on one thread: an L-BFGS step on a few hundred rows is a
handful of small products that threads only synchronise (the main job's PRM: 192 rows of 579 inputs, 144 fits
per cross-validated training)."""


@contextlib.contextmanager
def _threads_for(x: torch.Tensor):
    threads = torch.get_num_threads()
    if x.numel() <= ONE_THREAD_ELEMENTS and threads > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def fit_head(head, x: torch.Tensor, y: torch.Tensor, l2: float, steps: int, losses: list | None = None):
    """Fit a head on cached features: L-BFGS on BCE + l2 * ||weights - initial weights||^2.

    Biases are not penalised, nor the weights of the head's last ``free_inputs`` inputs (the agent's
    signals: a handful of strong columns that one penalty sized for hundreds of hidden dimensions
    would drown). The value head's input standardisation is refitted on ``x`` first.
    """
    if hasattr(head, "fit_normalizer"):
        head.fit_normalizer(x)
    head_weights = [p for name, p in head.named_parameters() if "bias" not in name]
    free = getattr(head, "free_inputs", 0)
    anchors = [(w[..., :-free] if free else w).detach().clone() for w in head_weights]
    optimizer = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(x), y)
        penalised = [w[..., :-free] for w in head_weights] if free else head_weights
        total = loss + l2 * sum(((w - a) ** 2).sum() for w, a in zip(penalised, anchors))
        total.backward()
        if losses is not None:
            losses.append(float(loss.detach()))
        return total

    with _threads_for(x):
        optimizer.step(closure)
    return head


def cross_validated_l2(head, x, y, row_group: np.ndarray, steps: int, seed: int, folds: int = 3):
    """Pick the L2 penalty with the lowest held-out log loss; ``row_group`` (non-negative ints, one
    per row: the episode, or a group of episodes that must stay together) is never split."""
    rng = np.random.default_rng(seed)
    groups = rng.permutation(int(row_group.max()) + 1)
    fold_of = np.empty(len(groups), dtype=int)
    fold_of[groups] = np.arange(len(groups)) % folds
    row_fold = torch.from_numpy(fold_of[row_group])
    table = {}
    for l2 in L2_GRID:
        total = 0.0
        for k in range(folds):
            held = row_fold == k
            if held.all() or not held.any():
                continue
            fitted = fit_head(copy.deepcopy(head), x[~held], y[~held], l2, steps)
            with torch.no_grad():
                total += float(
                    torch.nn.functional.binary_cross_entropy_with_logits(fitted(x[held]), y[held], reduction="sum")
                )
        table[l2] = round(total / len(y), 4)
    return min(table, key=table.get), table
