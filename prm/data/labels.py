"""Monte-Carlo labels for every decision point, and the train/validation split by episode.

Labels (columns added by ``add_labels``):
- ``label_hard``: 1.0 when the episode succeeded (``success >= threshold``), else 0.0 — "did the
  episode succeed from here", Math-Shepherd's hard estimate with one rollout.
- ``label_soft``: the mean outcome (the float ``success``) over all episodes whose rendered text up
  to this step's tag is identical — Math-Shepherd's soft estimate. Episodes that share a prefix
  are the Monte-Carlo completions of that prefix; the PRM cannot tell them apart, so their mean is
  the best target it can reach. The float is used directly, so fractional outcomes (ProductQA's
  mean per-question reward) count as such.
- ``return_to_go``: sum of ``reward`` from this step to the end of the episode (for inspection).
- ``label_process``: this step's own ``reward`` clipped to [0, 1], the process reward where the
  environment gives one (``has_process_rewards`` says whether it does).
- ``label_proposal``: the base agent's proposal's own reward (``proposal_reward``) clipped to
  [0, 1], null where none was logged — the direct answer to "does this proposal look right?",
  known also where an intervention replaced the proposal. ``default_target`` picks it in
  ``proposal`` mode when every row has it.
- ``label_fatal``: 0.0 on the step a failed episode ended on (its last row: the fatal step), 1.0 on
  every other row (the steps before it were survived). Needs no step reward: where only the end is
  rewarded it is the agent's own step outcome that ``process`` reads from a step reward.
- ``label_mc``: where the collection cloned the episode at every decision (``cf_base_success``,
  ``cf_intervene_success``: base acts here / an intervention here, then the base agent alone to the
  end), 1 minus the gain of intervening here clipped to [0, 1]: Math-Shepherd's Monte-Carlo
  completions of both actions from this step; low where intervening here saves the episode.
  Null where a row has no branches (``has_branches`` says whether every row has them).

With ``tag_after="proposal"`` the prefix keys are those of the proposal rendering.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from prm.data.episodes import require_proposals
from prm.inputs.render import prefix_keys

TARGETS = ("hard", "soft", "process", "proposal", "fatal", "mc")
LABEL_COLUMNS = {"hard": "label_hard", "soft": "label_soft", "process": "label_process", "proposal": "label_proposal",
                 "fatal": "label_fatal", "mc": "label_mc"}
STEP_TARGETS = ("process", "proposal", "fatal", "mc")
"""Targets that label each step by its own outcome (not the episode's): every episode may succeed."""
BRANCH_COLUMNS = ("cf_base_success", "cf_intervene_success")


class SingleClassError(ValueError):
    """The data has no successful or no failed episode, so there is nothing to discriminate."""


def check_threshold(threshold: float) -> float:
    """``threshold`` if it lies in [0, 1]; NaN (which makes every label false) is refused too."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"success_threshold={threshold}: give a number in [0, 1] (a success at or above it is "
                         "a win), e.g. --success-threshold 0.5")
    return threshold


def add_labels(frame: pl.DataFrame, threshold: float = 0.5, tag_after: str = "action") -> pl.DataFrame:
    """Return ``frame`` sorted by (episode_id, step) with the label columns added."""
    frame = frame.sort(["episode_id", "step"])
    keys: list[str] = []
    if tag_after == "proposal":
        require_proposals(frame, "the data")
    columns = ["state_text", "action_text"] + (["proposal_text"] if tag_after == "proposal" else [])
    grouped = frame.group_by("episode_id", maintain_order=True).agg(*columns)
    for states, actions, *proposals in zip(*(grouped[c] for c in columns)):
        keys.extend(prefix_keys(list(states), list(actions), tag_after, list(proposals[0]) if proposals else None))
    frame = frame.with_columns(pl.Series("prefix_key", keys, dtype=pl.String))
    proposal = (pl.col("proposal_reward").cast(pl.Float64).clip(0.0, 1.0) if "proposal_reward" in frame.columns
                else pl.lit(None, dtype=pl.Float64))
    if all(c in frame.columns for c in BRANCH_COLUMNS):
        gain = pl.col("cf_intervene_success").cast(pl.Float64) - pl.col("cf_base_success").cast(pl.Float64)
        mc = 1.0 - gain.clip(0.0, 1.0)
    else:
        mc = pl.lit(None, dtype=pl.Float64)
    failed = pl.col("success").cast(pl.Float64) < threshold
    return frame.with_columns(
        proposal.alias("label_proposal"),
        mc.alias("label_mc"),
        # The last row of a failed episode is its fatal step; rows with a later step were survived.
        pl.when(failed & (pl.col("step") == pl.col("step").max().over("episode_id"))).then(0.0).otherwise(1.0)
        .alias("label_fatal"),
        (pl.col("success") >= threshold).cast(pl.Float64).alias("label_hard"),
        pl.col("success").cast(pl.Float64).mean().over("prefix_key").alias("label_soft"),
        pl.col("reward").reverse().cum_sum().reverse().over("episode_id").alias("return_to_go"),
        pl.col("reward").clip(0.0, 1.0).alias("label_process"),
    )


def has_proposal_rewards(frame: pl.DataFrame) -> bool:
    """True when every row logged its proposal's reward (collected with --decide-after proposal)."""
    return "proposal_reward" in frame.columns and frame.height > 0 and frame["proposal_reward"].null_count() == 0


def default_target(frame: pl.DataFrame, tag_after: str) -> str:
    """``proposal`` in proposal mode when every row has ``proposal_reward``, else ``soft``."""
    return "proposal" if tag_after == "proposal" and has_proposal_rewards(frame) else "soft"


def has_branches(frame: pl.DataFrame) -> bool:
    """True when every row carries both counterfactual outcomes (collected with --counterfactual)."""
    return (frame.height > 0 and all(c in frame.columns for c in BRANCH_COLUMNS)
            and all(frame[c].null_count() == 0 for c in BRANCH_COLUMNS))


def has_process_rewards(frame: pl.DataFrame) -> bool:
    """True when some non-final step has a non-zero reward (the env rewards steps, not only ends)."""
    return frame.filter(~pl.col("done") & (pl.col("reward") != 0)).height > 0


def class_counts(frame: pl.DataFrame, threshold: float = 0.5) -> tuple[int, int]:
    """(successful episodes, failed episodes) with success meaning ``success >= threshold``."""
    outcome = frame.group_by("episode_id").agg(pl.col("success").first() >= threshold)["success"]
    wins = int(outcome.sum())
    return wins, len(outcome) - wins


def require_both_classes(frame: pl.DataFrame, threshold: float = 0.5, source: str = "the data") -> None:
    wins, losses = class_counts(frame, threshold)
    if wins == 0 or losses == 0:
        raise SingleClassError(
            f"Refusing to train on {source}: {wins} successful and {losses} failed episodes "
            f"(success >= {threshold}). A PRM needs both; collect episodes with more varied "
            "outcomes (e.g. other explore_p values or tasks), or train with another threshold "
            "(python benchmarks/experiment.py prm train --success-threshold; the pipeline uses 0.5) or a step label "
            "(--target process)."
        )


def split_episodes(
    frame: pl.DataFrame, val_fraction: float = 0.2, seed: int = 0, threshold: float = 0.5
) -> tuple[list[str], list[str]]:
    """Split episode ids into (train, validation), never splitting an episode's rows.

    Stratified by outcome so both sides see both classes whenever a class has two episodes or
    more; deterministic for a given seed.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction}: must be strictly between 0 and 1.")
    outcome = frame.group_by("episode_id").agg(pl.col("success").first() >= threshold).sort("episode_id")
    rng = np.random.default_rng(seed)
    train, val = [], []
    for won in (True, False):
        ids = outcome.filter(pl.col("success") == won)["episode_id"].to_list()
        rng.shuffle(ids)
        n_val = round(len(ids) * val_fraction)
        if len(ids) >= 2:
            n_val = min(max(n_val, 1), len(ids) - 1)
        val.extend(ids[:n_val])
        train.extend(ids[n_val:])
    return sorted(train), sorted(val)
