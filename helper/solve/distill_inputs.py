"""What both distills (``distill``, one kind; ``tiered_distill``, kinds at their prices) decide the same way: which
episodes are held out, and whether the helper decides before or after the base agent's proposal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from agile.seeding import stable_uniform


def held_out_mask(episode_ids: pl.Series, fraction: float, seed: int) -> np.ndarray:
    """Held-out rows: a row's episode is in the test set when its seeded hash falls below ``fraction``."""
    unique = episode_ids.unique().to_list()
    chosen = {e for e in unique if stable_uniform(seed, e, "distill-split") < fraction}
    if fraction > 0 and not chosen and len(unique) > 1:
        chosen = {min(unique)}  # tiny data: keep at least one episode out
    return episode_ids.is_in(list(chosen)).to_numpy()


def prm_decide_after(prm_path: Path | None) -> str:
    """``proposal`` for a PRM trained with ``--tag-after proposal`` (its score reads the base agent's
    proposal, so the helper must decide after it), else ``state``."""
    if prm_path is None:
        return "state"
    settings = json.loads((prm_path / "prm_config.json").read_text())
    return "proposal" if settings.get("tag_after") == "proposal" else "state"
