"""Threshold baselines at full strength: the level each cap is played at, chosen on the training folds.

    levels, report = capped_levels(rows, score, budgets=[1, 2])   # {C: level}: best success under cap C
    free = spend_levels(score, decisions, targets=[1, 2, 3])      # {s: level}: spends about s, no cap

A threshold gate (``helper.gates.simple.ScoreThresholdGate``) intervenes while its budget lasts wherever its score is at or
below a level. Two readings need two kinds of level:

- *under a cap C* the level is the one a user tuning a threshold for that cap would keep: the best success under
  cap C on the training rows, read on folds each fitted without it (``tabular_rl.choice.selection``: the helper's own
  threshold members and evaluator, so a threshold and the helper are chosen by one rule). A level that fires on
  about C decisions an episode leaves the cap unspent wherever an episode has fewer such decisions; the chosen one
  is usually higher.
- *at an average spend* (a cost per episode, no cap) the level is the quantile of the training scores below which
  ``s`` decisions an episode fall (``helper.gates.simple.calibrate_threshold``), played with no cap; several such levels draw
  the baseline's curve of success against interventions, which ``helpgate report`` reads at the priced helper's spend.

``score`` is one value per training row: the PRM's out-of-fold score for ``prm_threshold``, the router's and kNN's
out-of-fold predictions for theirs.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from helper.gates.simple import calibrate_threshold
from helper.gates.training_folds import fold_ids
from tabular_rl.choice.members import threshold_specs
from tabular_rl.choice.selection import cross_fitted

FOLDS = 5


def capped_levels(rows: pl.DataFrame, score: np.ndarray, budgets: list[int], folds: int = FOLDS,
                  evaluator: str = "auto") -> tuple[dict[int, float], dict]:
    """Per cap C >= 1 of ``budgets``, the level with the best cross-fitted success under C (module docstring), as a
    score value of all training rows; and a report (the share chosen, its cross-fitted success and spend)."""
    score = np.asarray(score, dtype=np.float64)
    caps = sorted({int(c) for c in budgets if int(c) > 0})
    decisions = float(rows.group_by("episode_id").len()["len"].mean())
    levels: dict[int, float] = {int(c): -np.inf for c in budgets if int(c) <= 0}
    if not caps:
        return levels, {}
    specs = threshold_specs(decisions, max(caps))
    ids, by = fold_ids(rows, folds)
    table = cross_fitted(rows, ids, specs, caps, evaluator=evaluator, score=score)
    finite = score[np.isfinite(score)]
    report = {"evaluator": table.evaluator, "folds_by": by, "folds": table.folds, "levels": {}}
    for c, i in table.best().items():
        share = specs[i].share
        levels[c] = float(np.quantile(finite, share, method="lower")) if finite.size else -np.inf
        j = table.budgets.index(c)
        report["levels"][str(c)] = {"share": share, "level": levels[c],
                                    "cross_fitted_success": _float(table.success[i, j]),
                                    "cross_fitted_interventions": _float(table.interventions[i, j])}
    return levels, report


def spend_levels(score: np.ndarray, decisions: float, targets: list[float]) -> dict[float, float]:
    """Per target spend ``s`` (interventions per episode), the level below which ``s`` of an episode's
    ``decisions`` fall in the training scores (``calibrate_threshold``; +inf once ``s`` covers every decision)."""
    return {s: calibrate_threshold(score, decisions, s) for s in targets}


def _float(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)
