"""Random tiered MDPs for the tiered tests (imported by plain name from any folder: it sits beside conftest.py)."""

import numpy as np

from tabular_rl.tiered import TieredModel


def random_tiered_model(seed: int, T: int, S: int, K: int, sparse: bool = False) -> TieredModel:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(S + 1), size=(T, S, K + 1))
    if sparse:  # some impossible transitions, renormalised
        p = np.where(rng.random(p.shape) < 0.4, 0.0, p)
        p[..., -1] += 1e-3
        p /= p.sum(-1, keepdims=True)
    return TieredModel(transitions=p, rewards=rng.random((T, S, K + 1)), start=rng.dirichlet(np.ones(S)),
                       kinds=tuple(f"kind{k}" for k in range(1, K + 1)), success=rng.random((T, S, K + 1)))
