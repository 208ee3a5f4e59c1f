"""Export trajectories as a PRM dataset for other trainers (TRL's PRMTrainer, OpenRLHF).

    helpgate prm export --data trajectories --out prm_trl.jsonl
    helpgate prm export --data trajectories --out prm_trl.parquet --target process

``--format trl`` is TRL's stepwise-supervision layout, one row per episode:

- ``prompt`` (str): ``"Step 0:\\n<state of step 0>\\n"``;
- ``completions`` (list of str): one per decision point, ``"Action: <action 0>"`` for the first,
  ``"Step t:\\n<state t>\\nAction: <action t>"`` after it;
- ``labels`` (list of bool): one per completion, the label ``--target`` names (below).

TRL's PRMTrainer appends its step separator (default ``"\\n"``) to each completion and puts the
prompt straight before the first one: the text it reads is exactly the text ``helpgate prm train``
renders (``prm.inputs.render``, step tag after the action) plus a final newline, and the label of a
completion sits on its separator, where our step tag is. (``tests/prm/data/test_prm_export.py`` runs TRL's
own trainer on an export to check this.) The labels, from ``prm.data.labels`` with the same names as
``prm train --target``, made boolean with ``--success-threshold``:

- ``soft`` (default): the mean outcome of the episodes that share the text up to this step (the
  Monte-Carlo estimate of success from here) is at least the threshold;
- ``hard``: the episode succeeded (the same label on every step of an episode);
- ``process``: this step's own reward is at least the threshold (for environments that reward
  steps; refused when the data has no step rewards).

Extra columns ``episode_id`` and ``success`` keep the link to the trajectories. The file is JSON
Lines unless ``--out`` ends in ``.parquet``; either loads with
``datasets.load_dataset("json" | "parquet", data_files=...)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from prm.data import labels as L
from prm.data.episodes import TRAIN_COLUMNS
from prm.inputs.render import step_pieces
from trajectories.files import write_atomic
from trajectories.shards import read_trajectories

FORMATS = ("trl",)


@dataclass
class ExportConfig:
    """Export trajectories as a PRM dataset for another trainer."""

    data: str = "trajectories"
    """Folder of trajectory Parquet shards."""
    out: str = "prm_trl.jsonl"
    """File to write: JSON Lines, or Parquet when the name ends in .parquet."""
    format: Literal["trl"] = "trl"
    """trl: TRL's stepwise supervision (prompt, completions, labels), as PRMTrainer reads it."""
    target: Literal["soft", "hard", "process"] = "soft"
    """Step label: soft (Monte-Carlo success from this step), hard (episode success), process (step reward)."""
    success_threshold: float = 0.5
    """A label is True when its value is at least this."""
    allow_incomplete: bool = False
    """Read a trajectory folder whose manifest is missing or says complete: false (a collection killed part way)
    as it is, instead of refusing it; recorded in the output."""
    base_only: bool = False
    """Keep only episodes where the base agent acted at every step (no intervention)."""


def trl_rows(frame: pl.DataFrame, target: str = "soft", threshold: float = 0.5) -> list[dict]:
    """One TRL stepwise-supervision row per episode of ``frame`` (every step of every episode)."""
    if target not in L.TARGETS:
        raise ValueError(f"target={target!r}: use one of {L.TARGETS}.")
    if target == "process" and not L.has_process_rewards(frame):
        raise ValueError("target='process': these trajectories have no step rewards (every non-final reward is 0); "
                         "use --target soft or hard.")
    labelled = L.add_labels(frame, threshold, tag_after="action")
    column = L.LABEL_COLUMNS[target]
    grouped = labelled.group_by("episode_id", maintain_order=True).agg(
        "state_text", "action_text", column, pl.col("success").first())
    rows = []
    for episode_id, states, actions, values, success in grouped.iter_rows():
        texts = [step_pieces(t, s, a, "action")[0] for t, (s, a) in enumerate(zip(states, actions))]
        first = f"Action: {actions[0]}"  # the first action opens the completions; its state is the prompt
        # TRL puts nothing between the prompt and the first completion: the prompt keeps its newline.
        prompt = texts[0].removesuffix(first)
        completions = [first] + [text.removeprefix("\n") for text in texts[1:]]
        rows.append({"prompt": prompt, "completions": completions, "labels": [v >= threshold for v in values],
                     "episode_id": episode_id, "success": float(success)})
    return rows


def run_export(cfg: ExportConfig) -> dict:
    if cfg.format not in FORMATS:
        raise ValueError(f"format={cfg.format!r}: use one of {FORMATS}.")
    L.check_threshold(cfg.success_threshold)
    frame = read_trajectories(cfg.data, require=TRAIN_COLUMNS, whole_episodes=True,
                              allow_incomplete=cfg.allow_incomplete)
    if cfg.base_only:
        intervened = frame.filter(pl.col("actor") != "base")["episode_id"].unique()
        frame = frame.filter(~pl.col("episode_id").is_in(intervened.implode()))
    rows = trl_rows(frame, cfg.target, cfg.success_threshold)
    out = Path(cfg.out)
    if out.suffix == ".parquet":
        table = pl.DataFrame(rows, schema={"prompt": pl.String, "completions": pl.List(pl.String),
                                           "labels": pl.List(pl.Boolean), "episode_id": pl.String,
                                           "success": pl.Float64})
        write_atomic(out, table.write_parquet)
    else:
        write_atomic(out, lambda temp: Path(temp).write_text("".join(json.dumps(row) + "\n" for row in rows)))
    steps = sum(len(row["labels"]) for row in rows)
    positive = sum(sum(row["labels"]) for row in rows)
    summary = {"episodes": len(rows), "steps": steps, "positive_labels": positive, "out": str(out)}
    print(f"prm export: {len(rows)} episodes, {steps} steps ({positive} labelled True, target {cfg.target}) "
          f"-> {out}")
    return summary
