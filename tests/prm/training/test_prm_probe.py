"""The frozen probe's fit: Newton's minimum of a value head's penalised logistic loss is the one L-BFGS reaches when
run to convergence, the penalty sparing the bias and the free inputs."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from prm.training.probe import cross_validated_l2, fit_head, lbfgs_fit
from prm.verifiers.model import TagHead, ValueHead


def _objective(head, x, y, l2, free, anchor):
    with torch.no_grad():
        weights = head.linear.weight[..., :-free] if free else head.linear.weight
        return float(torch.nn.functional.binary_cross_entropy_with_logits(head(x), y)
                     + l2 * ((weights - anchor) ** 2).sum())


def _converged_lbfgs(head, x, y, l2, free):
    head.fit_normalizer(x)
    anchor = (head.linear.weight[..., :-free] if free else head.linear.weight).detach().clone()
    lbfgs_fit(head, x, y, l2, steps=20_000, tolerance_grad=1e-12, tolerance_change=1e-16, history_size=50)
    return head, anchor


@pytest.mark.parametrize("l2", [1e-3, 0.1, 1.0])
@pytest.mark.parametrize("free", [0, 3])
def test_newton_reaches_the_converged_minimum(l2, free):
    generator = torch.Generator().manual_seed(int(l2 * 1000) + free)
    x = torch.randn(150, 20, generator=generator) * 4 + 2
    truth = torch.randn(20, generator=generator)
    y = (torch.rand(150, generator=generator) < torch.sigmoid((x - 2) / 4 @ truth)).float()
    start = ValueHead(20, free_inputs=free)
    with torch.no_grad():  # a non-zero start: the penalty pulls toward it, not toward zero
        start.linear.weight.normal_(generator=generator)
    newton = fit_head(copy.deepcopy(start), x, y, l2, steps=200)
    reference, anchor = _converged_lbfgs(copy.deepcopy(start), x, y, l2, free)
    assert _objective(newton, x, y, l2, free, anchor) <= _objective(reference, x, y, l2, free, anchor) * (1 + 1e-6)
    assert torch.allclose(newton.linear.weight, reference.linear.weight, atol=2e-3)
    assert torch.allclose(newton.linear.bias, reference.linear.bias, atol=2e-3)


def test_other_heads_keep_lbfgs():
    """A tag head is no single linear unit: fitted as before, and it moves off its start."""
    x, y = torch.randn(64, 8), (torch.arange(64) % 2).float()
    head = TagHead(torch.zeros(2, 8))
    fit_head(head, x, y, 0.01, steps=50)
    assert head.rows.abs().sum() > 0


def test_cross_validation_prefers_the_penalty_that_generalises():
    """Pure-noise labels on many inputs: the held-out loss falls as the penalty grows, so the largest is chosen."""
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(120, 200, generator=generator), (torch.rand(120, generator=generator) < 0.5).float()
    l2, table = cross_validated_l2(ValueHead(200), x, y, np.repeat(np.arange(40), 3), steps=200, seed=0)
    assert l2 == max(table) and table[max(table)] < table[min(table)]
