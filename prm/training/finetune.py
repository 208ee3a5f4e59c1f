"""Training a PRM end to end, out of fold: LoRA adapters on the causal backbone, or a whole encoder.

A frozen backbone's features are computed once and only heads are fitted per fold (``prm.training.train``).
Here the backbone's weights move, so every fold trains its own copy of the fresh PRM on the other
folds' episodes and scores its own fold with it; then one more copy trained on every episode is
the model saved (the gate's). The seconds of each fold's training are returned for the report.

Warm start. Each copy's value head starts as the frozen probe (``prm.training.probe.fit_head``, L2 chosen by
cross-validation) fitted on that copy's own training rows over the fresh backbone's features: the
few hundred optimiser steps a CPU affords then refine the backbone from where the frozen PRM stops
instead of first finding a head from zero. The features are computed once (every copy starts from
the same backbone); a probe never sees its fold's held-out rows. The tag head needs no warm start
(it starts as the LM's own +/- rows).

Optimiser: AdamW, the backbone's trainable weights at ``lr`` and the head at ``head_lr``, gradient
norm clipped at 1, length-bucketed batches of about ``step_tokens`` padded tokens in a new random
order each epoch; rows whose label is not used (``--base-only``) drop out of the loss.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch

from prm.training.probe import cross_validated_l2, fit_head

LORA_LR = 2e-4
ENCODER_LR = 5e-5


@dataclass
class FineTuned:
    oof: np.ndarray | None
    """Out-of-fold score of every training row (None without folds)."""
    losses: list[float]
    """Training losses of the all-data model, per optimiser step."""
    fold_seconds: list[float]
    """Seconds to train (and score) each fold's copy."""
    all_seconds: float
    """Seconds to train the all-data model."""
    l2: float | None
    """The all-data probe's L2 penalty (value head), else None."""


def default_lr(encoder: bool) -> float:
    return ENCODER_LR if encoder else LORA_LR


def fine_tune(prm, episodes, target: np.ndarray, used: np.ndarray, episode_fold: np.ndarray | None,
              row_group: np.ndarray, cfg, rng: np.random.Generator, on_fold=None) -> FineTuned:
    """Train ``prm`` in place on every episode (the saved model) and, with ``episode_fold`` (one fold
    per episode), a copy per fold that scores the fold it did not see. ``target``, ``used`` and
    ``row_group`` have one entry per row, in the episodes' step order. ``on_fold(k, rows, scores)``
    is called as each fold finishes (its held-out row indices and their scores)."""
    lengths = np.array([len(e[0]) for e in episodes])
    starts = np.concatenate([[0], np.cumsum(lengths)])
    row_episode = np.repeat(np.arange(len(episodes)), lengths)
    features = None
    if prm.settings.head == "value":
        features = torch.from_numpy(np.concatenate(prm.episode_features(episodes, cfg.batch_tokens, cfg.progress)))
    fresh = copy.deepcopy(prm) if episode_fold is not None else None
    oof, fold_seconds = None, []
    if episode_fold is not None:
        oof = np.full(len(row_episode), np.nan)
        for k in range(int(episode_fold.max()) + 1):
            start = time.perf_counter()
            model = copy.deepcopy(fresh)
            kept = np.flatnonzero(episode_fold != k)
            _train(model, [episodes[i] for i in kept], np.isin(row_episode, kept), target, used, features,
                   row_group, cfg, rng, [])
            held = np.flatnonzero(episode_fold == k)
            for i, scores in zip(held, model.score_episodes([episodes[i] for i in held], cfg.batch_tokens)):
                oof[starts[i]:starts[i + 1]] = scores
            fold_seconds.append(round(time.perf_counter() - start, 2))
            if on_fold is not None:
                rows_k = np.flatnonzero(np.isin(row_episode, held))
                on_fold(k, rows_k, oof[rows_k], fold_seconds[-1])
            print(f"prm train: fold {k} trained and scored in {fold_seconds[-1]:.0f} s", flush=True)
            del model
    start = time.perf_counter()
    losses: list[float] = []
    l2 = _train(prm, list(episodes), np.ones(len(row_episode), bool), target, used, features, row_group, cfg, rng,
                losses)
    return FineTuned(oof, losses, fold_seconds, round(time.perf_counter() - start, 2), l2)


def _warm_start(prm, x: torch.Tensor, y: torch.Tensor, groups: np.ndarray, cfg) -> float:
    """Fit the value head as the frozen probe on these rows; returns its L2 penalty."""
    head = prm.head.cpu()
    l2 = cfg.l2 if cfg.l2 is not None else cross_validated_l2(head, x, y, np.unique(groups, return_inverse=True)[1],
                                                              cfg.head_steps, cfg.seed)[0]
    fit_head(head, x, y, l2, cfg.head_steps)
    prm.head.to(prm.device)
    return l2


def _train(prm, episodes, rows: np.ndarray, target, used, features, row_group, cfg, rng, losses: list) -> float | None:
    """Train ``prm`` (in place) on ``episodes``, whose rows are ``rows`` (a mask over all rows)."""
    from tqdm.auto import tqdm

    fit = rows & used
    l2 = None
    if features is not None:
        y = torch.as_tensor(target[fit], dtype=torch.float32)
        l2 = _warm_start(prm, features[torch.from_numpy(fit)], y, row_group[fit], cfg)
    # Unused rows get a NaN target and drop out of the loss.
    masked = np.where(used, target, np.nan)[rows]
    per_episode = np.split(masked, np.cumsum([len(e[0]) for e in episodes])[:-1])
    head_params = list(prm.head.parameters())
    backbone_params = [p for p in prm.backbone.parameters() if p.requires_grad]
    lr = cfg.lr if cfg.lr is not None else default_lr(bool(prm.settings.encoder))
    optimizer = torch.optim.AdamW([{"params": backbone_params, "lr": lr}, {"params": head_params, "lr": cfg.head_lr}],
                                  weight_decay=0.0)
    found = prm.windows_for(episodes)
    batches = list(prm.batches(found, cfg.step_tokens))
    prm.train()
    for epoch in range(cfg.epochs):
        with tqdm(total=sum(b.tokens for b in batches), unit="tok", unit_scale=True, desc=f"prm train epoch {epoch}",
                  disable=not cfg.progress) as bar:
            for i in rng.permutation(len(batches)):
                batch = batches[i]
                label = torch.tensor(np.concatenate([per_episode[w.episode][w.steps] for w in batch.windows]),
                                     dtype=torch.float32, device=prm.device)
                keep = ~torch.isnan(label)
                bar.update(batch.tokens)
                if not keep.any():
                    continue
                loss = torch.nn.functional.binary_cross_entropy_with_logits(prm(batch)[keep], label[keep])
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(backbone_params + head_params, 1.0)
                optimizer.step()
                losses.append(float(loss.detach()))
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
    prm.eval()
    return l2
