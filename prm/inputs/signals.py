"""The base agent's own confidence signals as PRM inputs, beside the backbone's hidden state.

An agent may say how sure it was of its proposal (``Action.signals``; the LLM agent gives
``answer_logprob``, ``margin`` and ``entropy``). Collection logs them per decision point as a map of
names to numbers in the ``proposal_signals`` column (empty when none; ``trajectories.number_maps``).
A PRM trained with signals stores their key order in its settings; every row becomes
``[value per key..., missing flag per key...]``: a key the row lacks (or a non-finite value) gives 0
and a missing flag of 1, so a linear head learns what an absent signal means instead of reading 0 as
a value. The value head standardises these
columns with the statistics of its training rows, like the hidden state.

State features (``prm train --state-features``) enter the same way: the environment's numbers about
the decision point (``Observation.features``, logged in the ``features`` column; TextWorld gives
progress, steps since progress, steps left, admissible commands and quest length) become keys
``state:<name>``. Unlike the text, they mean the same in every game, so a head that reads them can
rank steps of a game it never saw (``benchmarks/RESULTS.md``, TextWorld held-out games).

Proposal features (``prm train --proposal-features``, ``prm.inputs.visible``) are numbers read from the state
and the proposal texts (the proposal's form, the search's outcome, the answer's shape), keys
``view:<name>``; they are computed from the ``state_text`` and ``proposal_text`` columns, not logged. Evidence
features (``prm train --evidence-features``, ``prm.inputs.evidence``) likewise, keys ``evidence:<name>``: the
record lines the sentence encoder retrieves for the question, against the proposal. Word features
(``prm train --word-features``, ``prm.inputs.words``), keys ``word:<w>``: which words of a fixed vocabulary the
state text holds, the one kind of signal column the L2 penalty covers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from prm.inputs.evidence import EVIDENCE_PREFIX
from prm.inputs.visible import VIEW_PREFIX, frame_view_features
from prm.inputs.words import WORD_PREFIX, frame_word_features
from trajectories.number_maps import number_maps

SIGNALS_COLUMN = "proposal_signals"
FEATURES_COLUMN = "features"
STATE_PREFIX = "state:"
"""Prefix of the keys that name state features (``features`` column) rather than agent signals."""


def frame_signals(frame: pl.DataFrame) -> list[dict[str, float]]:
    """Every row's signals, in row order (all empty when the frame has no signals column)."""
    if SIGNALS_COLUMN not in frame.columns:
        return [{} for _ in range(frame.height)]
    return number_maps(frame[SIGNALS_COLUMN])


def signal_keys(frame: pl.DataFrame) -> list[str]:
    """The signal names the frame's rows carry, sorted (the fixed order a PRM stores)."""
    return sorted({key for row in frame_signals(frame) for key in row})


def frame_state_features(frame: pl.DataFrame) -> list[dict[str, float]]:
    """Every row's state features as ``state:<name>`` keys (all empty without a features column)."""
    if FEATURES_COLUMN not in frame.columns:
        return [{} for _ in range(frame.height)]
    return [state_inputs(features) for features in number_maps(frame[FEATURES_COLUMN])]


def state_inputs(features: Mapping[str, float]) -> dict[str, float]:
    """An observation's ``features`` under the ``state:`` keys a PRM reads them by."""
    return {f"{STATE_PREFIX}{name}": float(value) for name, value in features.items()}


def state_keys(frame: pl.DataFrame) -> list[str]:
    """The ``state:<name>`` keys of the frame's features, sorted."""
    return sorted({key for row in frame_state_features(frame) for key in row})


def signal_vector(signals: Mapping[str, float], keys: Sequence[str]) -> np.ndarray:
    """``[value per key..., missing flag per key...]`` of one decision point (float32)."""
    values = np.zeros(len(keys), dtype=np.float32)
    missing = np.ones(len(keys), dtype=np.float32)
    for j, key in enumerate(keys):
        value = signals.get(key)
        if value is not None and math.isfinite(value):
            values[j], missing[j] = value, 0.0
    return np.concatenate([values, missing])


def signal_matrix(frame: pl.DataFrame, keys: Sequence[str]) -> np.ndarray:
    """``signal_vector`` of every row of ``frame``, in row order: shape ``[rows, 2 * len(keys)]``."""
    rows = frame_signals(frame)
    if any(key.startswith(STATE_PREFIX) for key in keys):
        rows = [{**said, **state} for said, state in zip(rows, frame_state_features(frame))]
    if any(key.startswith(VIEW_PREFIX) for key in keys):
        rows = [{**said, **view} for said, view in zip(rows, frame_view_features(frame))]
    if any(key.startswith(EVIDENCE_PREFIX) for key in keys):
        from prm.inputs.evidence import frame_evidence_features

        rows = [{**said, **found} for said, found in zip(rows, frame_evidence_features(frame))]
    if any(key.startswith(WORD_PREFIX) for key in keys):
        rows = [{**said, **found} for said, found in zip(rows, frame_word_features(frame))]
    if not rows:
        return np.zeros((0, 2 * len(keys)), dtype=np.float32)
    return np.stack([signal_vector(row, keys) for row in rows])


def missing_block(rows: int, keys: Sequence[str]) -> np.ndarray:
    """Signal rows of decision points with no signals at all."""
    return np.tile(signal_vector({}, keys), (rows, 1))
