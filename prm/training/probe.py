"""The frozen probe: a head fitted on cached backbone features, its L2 penalty chosen by cross-validation.

``prm train`` fits the head this way on a frozen backbone; ``prm.training.finetune`` starts each fine-tuned
copy's value head from the same probe.
"""

from __future__ import annotations

import copy

import numpy as np
import torch


L2_GRID = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
"""Penalties tried by cross-validation; the loss is a mean over rows, so 1.0 is very strong."""

NEWTON_TOLERANCE = 1e-9
"""A linear head's Newton solve stops once no gradient entry of the penalised loss exceeds this."""


def fit_head(head, x: torch.Tensor, y: torch.Tensor, l2: float, steps: int, losses: list | None = None):
    """Fit a head on cached features: minimise BCE + l2 * ||weights - initial weights||^2.

    Biases are not penalised, nor the weights of the head's last ``free_inputs`` inputs (the agent's
    signals: a handful of strong columns that one penalty sized for hundreds of hidden dimensions
    would drown). The value head's input standardisation is refitted on ``x`` first.

    A value head (one linear unit on standardised inputs) is a penalised logistic regression, convex: Newton's
    method with a backtracking line search reaches its minimum in a few dozen solves of the (inputs + 1)-square
    system, where L-BFGS spent ~120 loss evaluations of Python overhead per fit (the CV of one PRM is 144 fits).
    Other heads, or more inputs than Newton's system suits, take L-BFGS with ``steps`` iterations.
    """
    if hasattr(head, "fit_normalizer"):
        head.fit_normalizer(x)
    if _is_linear_value_head(head) and x.shape[-1] <= 4096:
        return _newton(head, x, y, l2, steps, losses)
    return lbfgs_fit(head, x, y, l2, steps, losses)


def lbfgs_fit(head, x: torch.Tensor, y: torch.Tensor, l2: float, steps: int, losses: list | None = None,
              **options):
    """``fit_head``'s loss by L-BFGS (strong Wolfe line search, ``steps`` iterations; ``options``: the optimizer's
    tolerances) on inputs already standardised: any head's fit, and the reference Newton is checked against."""
    head_weights = [p for name, p in head.named_parameters() if "bias" not in name]
    free = getattr(head, "free_inputs", 0)
    anchors = [(w[..., :-free] if free else w).detach().clone() for w in head_weights]
    optimizer = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=steps, line_search_fn="strong_wolfe",
                                  **options)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(x), y)
        penalised = [w[..., :-free] for w in head_weights] if free else head_weights
        total = loss + l2 * sum(((w - a) ** 2).sum() for w, a in zip(penalised, anchors))
        total.backward()
        if losses is not None:
            losses.append(float(loss.detach()))
        return total

    optimizer.step(closure)
    return head


def _is_linear_value_head(head) -> bool:
    names = {name for name, _ in head.named_parameters()}
    linear = getattr(head, "linear", None)
    return (names == {"linear.weight", "linear.bias"} and isinstance(linear, torch.nn.Linear)
            and linear.out_features == 1 and hasattr(head, "mean") and hasattr(head, "scale"))


@torch.no_grad()
def _newton(head, x: torch.Tensor, y: torch.Tensor, l2: float, steps: int, losses: list | None):
    """The value head's penalised logistic regression by damped Newton steps, in float64 (see ``fit_head``)."""
    z = ((x.double() - head.mean.double()) / head.scale.double())
    z = torch.cat([z, z.new_ones(len(z), 1)], dim=1)  # the bias as a last input
    target = y.double()
    free = getattr(head, "free_inputs", 0)
    inputs = z.shape[1] - 1
    penalty = torch.full((inputs + 1,), float(l2), dtype=torch.float64)
    penalty[inputs - free:] = 0.0  # the free inputs and the bias
    theta = torch.cat([head.linear.weight.detach().double()[0], head.linear.bias.detach().double()])
    anchor = theta.clone()

    def objective(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = z @ t
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        return loss + (penalty * (t - anchor) ** 2).sum(), loss

    total, loss = objective(theta)
    for _ in range(max(1, steps)):
        p = torch.sigmoid(z @ theta)
        gradient = z.T @ (p - target) / len(z) + 2 * penalty * (theta - anchor)
        if gradient.abs().max() <= NEWTON_TOLERANCE:
            break
        curvature = (z * (p * (1 - p))[:, None]).T @ z / len(z) + torch.diag(2 * penalty)
        # Unpenalised directions of separable rows have no curvature: a small ridge keeps the system solvable.
        curvature.diagonal().add_(1e-10 + 1e-8 * curvature.diagonal().abs().max())
        step = torch.linalg.solve(curvature, -gradient)
        slope = float(gradient @ step)
        size = 1.0
        while True:  # backtracking (Armijo): a Newton step can overshoot far from the minimum
            trial = theta + size * step
            trial_total, trial_loss = objective(trial)
            if trial_total <= total + 1e-4 * size * slope or size < 1e-10:
                break
            size /= 2
        if size < 1e-10:
            break
        theta, total, loss = trial, trial_total, trial_loss
        if losses is not None:
            losses.append(float(loss))
    head.linear.weight.copy_(theta[:inputs].to(head.linear.weight.dtype)[None])
    head.linear.bias.copy_(theta[inputs:].to(head.linear.bias.dtype))
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
