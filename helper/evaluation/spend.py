"""The second yardstick: success at an average spend, no cap.

A cap C is the gate's promise (never more than C in an episode); a cost per intervention is another user's
constraint (no cap, a price), read as success at a mean spend. There the priced helper (``helper_priced``: the helper
priced to spend s interventions an episode, no cap) is compared with each threshold-type baseline played with no cap
at levels that spend about 1, 2, ... an episode (rows ``<method>_nocap``, keyed by the spend the level was set to on
the training rows): every run plays 1 .. the largest budget + 1 (so runs pooled as seeds or folds share those
levels), and goes on until the baseline's curve reaches past the priced helper's largest spend: no reading is out of
reach. Each baseline's success at the priced helper's mean spend is read on its own curve (never's
C = 0 row as its zero point): the two levels whose mean spends bracket it, mixed as a gate playing the larger on that
share of the episodes (``metrics.spend_matched_mix``), per episode, so the comparison stays paired.

- ``play_free``: a threshold method's levels with no cap (called by its ``run``);
- ``at_spend``: per baseline and target spend, the priced helper minus the baseline at the priced helper's spend
  (``summary.json``'s ``at_spend``; ``helpgate report`` adds the interval and the verdict).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from helper.gates.simple import ScoreThresholdGate, calibrate_threshold
from helper.evaluation.metrics import spend_matched_mix

FREE = "_nocap"
"""Suffix of a method's rows played with no cap, at a level set to a spend."""
PRICED = "helper_priced"


def free_row(method: str) -> str:
    return f"{method}{FREE}"


def play_free(ctx, method) -> None:
    """``method`` (a ``ThresholdMethod``: ``train_score``, ``decisions``, ``score_fn``) with no cap at the levels that
    spend 1, 2, ... interventions an episode on its training scores: 1 .. max(budgets) + 1, then on until its largest
    mean spend reaches the priced helper's (or every decision is asked)."""
    cap = int(ctx.env.horizon)
    targets = [c for c in ctx.budgets if c > 0] or [1]
    priced = ctx.usage(PRICED)
    goal = max(priced.values()) if priced else None
    row = free_row(method.row)
    played: dict[int, float] = {}
    levels = {}

    def play(spend: int) -> None:
        level = calibrate_threshold(method.train_score, method.decisions, spend)
        levels[spend] = level
        gate = ScoreThresholdGate(method.score_fn(ctx), level, cap, name=row, decide_after=method.decide_after)
        result = ctx.evaluate(row, lambda _: gate, [spend], cap=cap)
        played[spend] = result[0][0]["interventions"]

    # Every run plays the same levels 1 .. max(targets) + 1 (the level past the largest target), so runs pooled as
    # seeds or cross-fit folds share a curve that passes their pooled priced spend; a run goes further only where
    # its own priced helper spends past that. A level that asks at every decision ends the curve.
    spend = 0
    while spend < min(max(targets) + 1, cap) and (spend == 0 or np.isfinite(levels[spend])):
        spend += 1
        play(spend)
    while goal is not None and max(played.values()) < goal - 1e-9 and spend < cap and np.isfinite(levels[spend]):
        spend += 1
        play(spend)
    ctx.extra.setdefault(method.name, {})["free_levels"] = {str(k): v for k, v in levels.items()}


def at_spend(per_episode: list[dict]) -> dict:
    """Per baseline (a ``*_nocap`` row) and priced-helper target: the baseline's success at the priced helper's mean
    spend on its no-cap curve and the priced helper minus it (None where the curve does not reach it)."""
    frame = pd.DataFrame(per_episode)
    if frame.empty or PRICED not in set(frame["method"]):
        return {}
    success = frame.pivot_table(index="episode_id", columns=["method", "budget"], values="success")
    spent = frame.pivot_table(index="episode_id", columns=["method", "budget"], values="interventions")
    out: dict = {}
    for method in sorted({m for m in frame["method"] if str(m).endswith(FREE)}):
        curve = curve_points(spent, method)
        for target in sorted(c for m, c in success.columns if m == PRICED):
            goal = float(spent[(PRICED, target)].mean())
            mix = spend_matched_mix({c: v for c, (v, _) in curve.items()}, goal)
            at = None if mix is None else float(sum(w * success[curve[c][1]] for c, w in mix.items()).mean())
            out.setdefault(method[: -len(FREE)], {})[int(target)] = {
                "helper_priced_interventions": goal, "mix": mix, "success_at_priced_spend": at,
                "helper_priced_minus": None if at is None else float(success[(PRICED, target)].mean()) - at}
    return out


def curve_points(spent: pd.DataFrame, method: str) -> dict[int, tuple[float, tuple[str, int]]]:
    """A no-cap curve's points ``{level: (mean spend, column)}``, never's C = 0 row as its level 0."""
    # Only levels every episode played (pooled folds may have extended a curve differently).
    points = {int(c): (float(spent[(m, c)].mean()), (m, c)) for m, c in spent.columns
              if m == method and not spent[(m, c)].isna().any()}
    if ("never", 0) in spent.columns:
        points[0] = (float(spent[("never", 0)].mean()), ("never", 0))
    return dict(sorted(points.items()))
