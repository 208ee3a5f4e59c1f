"""Train the process reward model on logged trajectories, then report its quality.

    helpgate prm train --data trajectories --out prm                      # frozen backbone, value head
    python benchmarks/experiment.py prm train --data trajectories --out prm --head tag          # Math-Shepherd tag head
    python benchmarks/experiment.py prm train --data trajectories --out prm --head tag --lora   # LoRA, whole backbone (GPU)
    helpgate prm train --data traj-prop --out prm --tag-after proposal   # scores the agent's proposal
    python benchmarks/experiment.py prm train --data traj-prop --out prm --tag-after proposal --lora --layers 4 \
        --history 0  # LoRA, CPU
    helpgate prm train --data traj-prop --out prm --tag-after proposal --model encoder  # cross-encoder

With ``--tag-after proposal`` (data collected with ``--decide-after proposal``) every step renders
the base agent's proposal before the tag (``prm.inputs.render``), and the default target is the
proposal's own reward (``label_proposal``: was the proposal right?) when every row logged it.

Frozen backbone: one inference pass caches the hidden state at every step tag, then the head is
fitted on those features by L-BFGS (a convex, L2-regularised logistic regression: fast on CPU,
no learning rate to tune). LoRA adapters, or a cross-encoder fine-tuned whole (``--model encoder``,
``prm.verifiers.encoder``): backbone and head trained together with AdamW, one copy per fold
(``prm.training.finetune``); each fold's held-out scores are written to ``fold_scores/`` as it finishes,
and ``metrics.json`` gives the seconds per fold (``fine_tune``).

Out of fold (frozen backbone, the default): the episodes are dealt into ``--folds`` folds (by task
group, prefix-sharing episodes together: ``prm.data.folds``; LoRA and encoder alike); one head (or, for a
trained verifier, one trained copy) per fold is fitted on the other
folds and scores the fold it did not see, and one head fitted on every episode is THE model saved
to ``--out`` (the one the gate loads). The out-of-fold scores go to ``oof_scores.parquet``, which
``prm score`` writes for exactly those training episodes, so everything fitted downstream (solve,
distill, thresholds, routers) reads scores of a model that never saw the episode, as the gate
does online. The quality report (AUROC, Brier, ECE of every step's score against the outcome) is
made on those out-of-fold scores; the all-data head's figure on its own training rows is reported
as ``in_fold``. With ``--folds 1`` a ``--val-fraction`` of the episodes is held out for the report
instead (one training instead of folds + 1 for a trained verifier), and ``prm score``
gives the training episodes in-fold scores (metrics.json says so).

Signals (``--signals``, on by default when the data's ``proposal_signals`` carry any): the base
agent's own confidence numbers (``prm.inputs.signals``) join the hidden state as head inputs; their key
order is stored with the PRM. Calibration (``--calibration``): a monotone map fitted on the
out-of-fold (or held-out) scores to the outcome (``prm.verifiers.calibration``), saved as
``calibration.json`` and applied by ``prm score`` and the gate; ``oof_scores.parquet`` holds the
calibrated scores (``prm_score``) beside the raw ones (``prm_score_raw``), and metrics.json gives
``oof_brier`` / ``oof_ece`` before and after (after: each fold mapped by a calibrator fitted on the
other folds, so the figure is not the map's own training fit).

Either way the report is printed and written to ``metrics.json`` and ``reliability.png`` (the
folds or the split go to ``split.json``, the report's scores to ``validation_scores.parquet``),
and the model is saved to ``--out`` (``prm.verifiers.load.load_prm``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
import torch

from prm.data import labels as L
from prm.training import quality
from prm.verifiers.backbones import is_encoder
from prm.verifiers.calibration import METHODS, cross_fitted, default_method, fit_calibrator
from prm.verifiers.model import FoldMeanHead
from prm.data.folds import Folds, assign_folds, task_type
from prm.training.probe import cross_validated_l2, fit_head
from trajectories import schema, shards
from trajectories.outputs import not_another_run, out_folder, outside_inputs
from prm.data.episodes import (
    FEATURES_FILE,
    OOF_FILE,
    TRAIN_COLUMNS,
    Validator,
    episodes_of,
    score_columns,
)
from prm.inputs.signals import SIGNALS_COLUMN, signal_keys, signal_matrix, state_keys


@dataclass
class TrainConfig:
    data: str = "trajectories"
    """Folder of trajectory Parquet shards (one row per decision point)."""
    out: str = "prm"
    """Folder to write the trained PRM, metrics.json and reliability.png to."""
    model: str = "smollm2"
    """Backbone: smollm2 (embedded), tiny (tests), a causal-LM Hugging Face id / local folder, or encoder[:NAME]
    (a cross-encoder fine-tuned whole: the embedded all-MiniLM-L6-v2, encoder:tiny, or encoder:FOLDER)."""
    head: Literal["value", "tag"] = "value"
    """value (linear head on the step-boundary hidden state) or tag (P(+) vs P(-) at the step tag)."""
    lora: bool = False
    """Train LoRA adapters with the head, one copy per fold (on a CPU: with --layers 4 --history 0); default
    trains the head on a frozen backbone."""
    target: Literal["soft", "hard", "process", "proposal", "fatal", "mc"] | None = None
    """Training label: soft (mean outcome over episodes sharing the prefix), hard (episode success),
    process (step reward), proposal (the base agent's proposal's reward, proposal_reward), fatal (0 on the step
    a failed episode ended on, 1 elsewhere: no step reward needed) or mc (1 - the gain of intervening here over
    the cloned branches; data collected with --counterfactual). Default: proposal with --tag-after proposal when
    every row has proposal_reward, else soft."""
    success_threshold: float = 0.5
    """An episode counts as a success when its success value is at least this."""
    folds: int | None = None
    """Cross-validation folds for the out-of-fold scores and report (default 5; with LoRA or an encoder each
    fold trains its own copy); 1: hold out --val-fraction instead (training rows then get in-fold scores)."""
    val_fraction: float = 0.2
    """With --folds 1: share of episodes held out for the quality report (by episode, stratified by outcome)."""
    seed: int = 0
    """Seed for the split, subsampling and initialisation."""
    max_episodes: int | None = None
    """Use at most this many episodes (a random subset), for quick runs."""
    batch_tokens: int = 8192
    """Padded tokens per forward pass (length-bucketed batches)."""
    max_length: int | None = None
    """Context cap in tokens (default: the backbone's); longer episodes are cut from the left."""
    tag_after: Literal["action", "state", "proposal"] = "action"
    """Put each step tag after the action (score of the step taken), after the state (pre-action value), or
    after the base agent's proposal (proposal_text: for a gate that decides after the proposal)."""
    l2: float | None = None
    """L2 penalty on the head weights (distance from the initial +/- rows for the tag head); unset: chosen
    by 3-fold cross-validation over training episodes (for LoRA / encoder: of the probe each copy starts from)."""
    head_steps: int = 200
    """Frozen backbone: L-BFGS iterations for the head."""
    epochs: int = 2
    """LoRA / encoder: passes over the training episodes."""
    lr: float | None = None
    """LoRA / encoder: AdamW learning rate of the adapters or the encoder (default 2e-4 LoRA, 5e-5 encoder)."""
    head_lr: float = 1e-4
    """LoRA / encoder: AdamW learning rate of the head (the value head starts as the frozen probe)."""
    step_tokens: int = 2048
    """LoRA / encoder: padded tokens per optimiser step (smaller: more steps per epoch)."""
    lora_r: int = 8
    """LoRA rank."""
    lora_alpha: int = 16
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA branch during training."""
    device: str | None = None
    """Torch device (default: cuda when available, else cpu)."""
    dtype: Literal["bf16", "fp16", "fp32"] | None = None
    """bf16, fp16 or fp32 (default: bf16 on GPU, fp32 on CPU)."""
    base_only: bool = False
    """Fit and judge only rows where the base agent acted (actor == base): its value, not the helper's."""
    layers: int | None = None
    """Keep only the first this many backbone layers (cheaper features from a middle layer; value head)."""
    history: int | None = None
    """Earlier steps each step's score reads besides its own (0: the step alone); unset: the whole episode
    so far. A short context ranks late steps better where each state already carries the agent's memory."""
    pooling: Literal["last", "mean"] = "last"
    """A step's hidden state for the head: at its tag (last token), or the mean over the step's tokens (a word
    said mid-step reaches the head even where a few layers do not carry it to the tag)."""
    feature_cache: str | None = None
    """.npz file that keeps frozen-backbone features between runs (to try other targets or heads)."""
    save_backbone: bool = False
    """Copy the backbone into --out (save_pretrained) so the PRM loads without the original model (always for tiny)."""
    group_by: str | None = None
    """Column whose values get their own validation metrics (e.g. a question-type column)."""
    bins: int = 10
    """Bins of the calibration error and the reliability plot."""
    signals: bool | None = None
    """Feed the base agent's signals (proposal_signals column) to the value head beside the hidden state;
    default: on when the data has any (value head, frozen backbone)."""
    state_features: bool = False
    """Feed the environment's state features (the features column, e.g. TextWorld's progress, steps since
    progress, steps left) to the value head beside the hidden state, unpenalised like the signals: they mean
    the same in every game, which the text does not."""
    proposal_features: bool = False
    """Feed the proposal's agent-visible form (prm.inputs.visible: searched, SQL error, empty search, answer kind and
    shape, the product details' agreement) to the value head beside the hidden state, unpenalised like the
    signals; needs --tag-after proposal."""
    evidence_features: bool = False
    """Feed the proposal checked against the record (prm.inputs.evidence: the product details, schema values and
    memory the sentence encoder retrieves for the question, against the answer or the SQL) to the value head,
    unpenalised like the signals; needs --tag-after proposal."""
    question_vector: bool = False
    """The value head also reads the sentence encoder's vector of each step's question (all-MiniLM-L6-v2, 384
    numbers, penalised like the hidden state): which kinds of question the agent gets wrong, across groups."""
    fold_mean: bool = False
    """The saved head (the gate's) is the mean of the fold heads that wrote the out-of-fold scores, not one head
    fitted on every episode, so new steps are scored on the scale the solve's cells were cut on
    (``prm.verifiers.model.FoldMeanHead``); frozen backbone, value head, --folds 2 or more."""
    word_features: bool = False
    """The value head reads which words of a fixed vocabulary the state text holds (prm.inputs.words), and nothing
    else: with --no-hidden, no signals, state, proposal or evidence features; the word columns are penalised."""
    hidden: bool = True
    """The value head reads the backbone's hidden state; --no-hidden: only the signals and state features (the text's
    game-specific content cannot leak into the score; the backbone then runs only when scoring)."""
    calibration: Literal["isotonic", "platt", "none"] | None = None
    """Map fitted on out-of-fold scores -> outcome, applied by prm score and the gate; default platt (keeps the
    score's ranking; isotonic's steps make ties)."""
    progress: bool = True
    """Show progress bars with tokens/s."""
    allow_incomplete: bool = False
    """Read a trajectory folder whose manifest is missing or says complete: false (a collection killed part way)
    as it is, instead of refusing it; recorded in the output."""


def episode_features(prm, frame: pl.DataFrame, cfg: TrainConfig) -> dict[str, np.ndarray]:
    """Hidden states at every step tag, per episode id; reuses ``cfg.feature_cache`` when it matches.

    The cache is keyed by everything that changes the features (backbone, layers, rendering,
    context, dtype) and, per episode, by the hash of its rendered text, so a re-collected episode
    with the same id is recomputed. It is a plain ``.npz`` (no pickle).
    """
    key = feature_key(prm, cfg.model, cfg.seed)
    last = frame.group_by("episode_id", maintain_order=True).agg(pl.col("prefix_key").last())
    content = dict(zip(last["episode_id"], last["prefix_key"]))
    path = Path(cfg.feature_cache) if cfg.feature_cache else None
    # Every episode the file holds is kept when it is saved again: folds of a cross-fit share one cache, each
    # fold reading its own training episodes, so a fold never drops what the next one reads.
    stored = load_features(path, key, None) if path and path.exists() else {}
    cache = {e: entry for e, entry in stored.items() if content.get(e) == entry[0]}
    todo = [e for e in content if e not in cache]
    # Chunks of episodes, each saved as it completes: a killed run keeps what it computed.
    chunk = 64 if path else max(len(todo), 1)
    for start in range(0, len(todo), chunk):
        ids, episodes = episodes_of(frame.filter(pl.col("episode_id").is_in(todo[start : start + chunk])),
                                    cfg.tag_after)
        for e, x in zip(ids, prm.episode_features(episodes, cfg.batch_tokens, cfg.progress)):
            cache[e] = (content[e], x)
        if path:
            save_features(path, key, stored | cache)
    print(f"prm train: features of {len(content)} episodes ({len(content) - len(todo)} from the cache).")
    return {e: cache[e][1] for e in content}


def feature_key(prm, model: str, seed: int) -> str:
    """Everything that changes the features: backbone (and its seed when random), layers, rendering."""
    # history joins the key only when set, so caches written before it existed stay valid.
    history = {} if prm.settings.history is None else {"history": prm.settings.history}
    pooling = {} if prm.settings.pooling == "last" else {"pooling": prm.settings.pooling}
    return json.dumps(
        history | pooling | {
            "model": model,
            "seed": seed if model == "tiny" else None,
            "layers": prm.settings.layers,
            "tag_after": prm.settings.tag_after,
            "tag": prm.settings.tag_text,
            "context": prm.context,
            "dtype": str(next(prm.backbone.parameters()).dtype),
        },
        sort_keys=True,
    )


def load_features(path: Path, key: str | None, content: dict[str, str] | None) -> dict[str, tuple[str, np.ndarray]]:
    """Cached features of the episodes whose rendered-text hash still matches ``content`` (``None``: every episode
    the file holds, under a matching key).

    ``key=None`` trusts the file's key (a cache inside the PRM folder, written with that PRM)."""
    cache: dict[str, tuple[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as stored:
        if key is None or str(stored["key"]) == key:
            parts = np.split(stored["features"], stored["offsets"][1:-1])
            for e, h, x in zip(stored["ids"].tolist(), stored["hashes"].tolist(), parts):
                if content is None or content.get(e) == h:
                    cache[e] = (h, x)
    return cache


def save_features(path: Path, key: str, cache: dict[str, tuple[str, np.ndarray]]) -> None:
    ids = list(cache)
    arrays = [cache[e][1] for e in ids]
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp.npz")
    np.savez(
        temp,
        key=np.array(key),
        ids=np.array(ids),
        hashes=np.array([cache[e][0] for e in ids]),
        offsets=np.cumsum([0] + [len(a) for a in arrays]),
        features=np.concatenate(arrays),
    )
    temp.replace(path)  # atomic: a kill mid-write leaves the previous cache intact


def run_train(cfg: TrainConfig, frame: pl.DataFrame | None = None, validate: Validator | None = None) -> dict:
    """Train, evaluate and save a PRM; returns the metrics written to ``metrics.json``.

    ``frame`` skips reading ``cfg.data`` (pass an already validated trajectory frame);
    ``validate(frame, source)`` runs on every shard read from ``cfg.data`` otherwise.
    """
    started = time.perf_counter()
    _check_options(cfg, reads_data=frame is None)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    frame = _read_frame(cfg, frame, validate, rng)
    target = _checked_target(frame, cfg)
    frame, keys = _labelled(frame, cfg, target)
    data = _dealt(frame, cfg, target, keys)
    try:
        prm = _create(cfg, keys)
    except OSError as error:  # a backbone that cannot be loaded: say which option named it
        raise OSError(f"--model {cfg.model}: {error}") from error
    fit = _fit_fine_tuned(prm, data, cfg, rng) if cfg.lora or is_encoder(cfg.model) else _fit_frozen(prm, data, cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    report, judged_frame = _report(prm, data, fit, cfg, started)
    _save(prm, data, fit, report, judged_frame, cfg)
    v = report["validation"]
    print(
        f"prm train: {'out-of-fold' if data.split else 'validation'} AUROC {v['auroc']:.3f}  Brier {v['brier']:.3f}  "
        f"ECE {v['ece']:.3f} over {v['rows']} steps against {report['outcome']} "
        f"(in-fold AUROC {report['in_fold_auroc']:.3f}); "
        f"wrote {out}/metrics.json, {out}/reliability.png and the model to {out}."
    )
    return report


# ---- run_train's steps, in the order it takes them ----------------------------------------------


def _check_options(cfg: TrainConfig, reads_data: bool) -> None:
    """Refuse an output folder, a backbone or an option that cannot work, before any data is read."""
    from prm.verifiers.backbones import check_backbone

    # Never '' (the current folder) nor into the collection it reads: readers would refuse its Parquet there.
    outside_inputs(out_folder(cfg.out, "runs/demo/prm"), {"--data": cfg.data if reads_data else None})
    not_another_run(cfg.out, "PRM")  # nor into or inside another command's folder (a solve, a helper)
    check_backbone(cfg.model, "--model")
    if is_encoder(cfg.model) and (cfg.lora or cfg.head != "value" or cfg.layers or cfg.pooling != "last"
                                  or not cfg.hidden or cfg.question_vector):
        raise ValueError(f"--model {cfg.model}: an encoder is fine-tuned whole with the value head on its own "
                         "mean-pooled window; drop --lora, --head tag, --layers, --pooling, --no-hidden and "
                         "--question-vector.")
    if cfg.fold_mean and (cfg.lora or cfg.head != "value" or is_encoder(cfg.model) or cfg.folds == 1):
        raise ValueError("fold_mean=True keeps the fold heads of a frozen backbone's value head: use --head value, "
                         "no --lora, no encoder, --folds 2 or more; or drop it.")
    if cfg.word_features and (cfg.hidden or cfg.head != "value" or cfg.lora or is_encoder(cfg.model) or cfg.signals
                              or cfg.state_features or cfg.proposal_features or cfg.evidence_features
                              or cfg.question_vector):
        raise ValueError("word_features=True: the head reads the state's words and nothing else; add --no-hidden and "
                         "drop --signals, --state-features, --proposal-features, --evidence-features, "
                         "--question-vector, --lora and --head tag.")
    if cfg.target is not None and cfg.target not in L.TARGETS:
        raise ValueError(f"target={cfg.target!r}: use one of {L.TARGETS}.")
    if cfg.calibration is not None and cfg.calibration not in METHODS:
        raise ValueError(f"calibration={cfg.calibration!r}: use one of {', '.join(METHODS)}.")
    L.check_threshold(cfg.success_threshold)


def _read_frame(cfg: TrainConfig, frame: pl.DataFrame | None, validate: Validator | None,
                rng: np.random.Generator) -> pl.DataFrame:
    """The trajectories (``cfg.data``, or the given frame) checked, cut to ``--max-episodes`` at random."""
    columns = score_columns(cfg.tag_after, TRAIN_COLUMNS)
    if frame is None:
        frame = shards.read_trajectories(cfg.data, require=columns, whole_episodes=True,
                                          allow_incomplete=cfg.allow_incomplete)
        frame = frame if validate is None else validate(frame, str(cfg.data))
    else:
        frame = schema.validate(frame, "the given frame", require=columns)
        schema.check_episodes(frame, "the given frame")
    for option, column in (("group_by", cfg.group_by), ("base_only", "actor" if cfg.base_only else None)):
        if column and column not in frame.columns:
            raise ValueError(f"{option} needs column {column!r}, which {cfg.data} lacks (columns: {frame.columns}).")
    if cfg.max_episodes:
        ids = frame["episode_id"].unique().sort().to_list()
        if len(ids) > cfg.max_episodes:
            keep = rng.choice(len(ids), cfg.max_episodes, replace=False)
            frame = frame.filter(pl.col("episode_id").is_in([ids[i] for i in keep]))
    return frame


def _checked_target(frame: pl.DataFrame, cfg: TrainConfig) -> str:
    """The training target (``--target``, else the data's default), refused when the data cannot label it."""
    target = cfg.target or L.default_target(frame, cfg.tag_after)
    if target not in L.STEP_TARGETS:  # these label each step by its own outcome (checked in _labelled),
        # and every episode may succeed while some of its answers are wrong
        L.require_both_classes(frame, cfg.success_threshold, cfg.data)
    if target == "proposal" and (cfg.tag_after != "proposal" or not L.has_proposal_rewards(frame)):
        raise ValueError(
            f"target='proposal' needs --tag-after proposal and a proposal_reward on every row of {cfg.data}; "
            "collect with --decide-after proposal, or use --target soft."
        )
    if target == "process" and not L.has_process_rewards(frame):
        raise ValueError(
            f"target='process' but {cfg.data} has no process rewards (every non-final step has "
            "reward 0). Use --target soft or hard."
        )
    if target == "mc" and not L.has_branches(frame):
        raise ValueError(
            f"target='mc' but {cfg.data} has no counterfactual branches on every row ({', '.join(L.BRANCH_COLUMNS)}); "
            "collect with --counterfactual (episodes that can be cloned), or use --target fatal."
        )
    return target


def _labelled(frame: pl.DataFrame, cfg: TrainConfig, target: str) -> tuple[pl.DataFrame, list[str] | None]:
    """The frame with its labels, the ``outcome`` the report measures and the rows it judges (``used``); and
    the signal keys the head reads."""
    frame = L.add_labels(frame, cfg.success_threshold, cfg.tag_after)
    keys = _signal_keys(frame, cfg)
    # What the report measures: the step's (or the proposal's) own outcome for process (proposal)
    # labels, else the episode's.
    outcome = pl.col(L.LABEL_COLUMNS[target] if target in L.STEP_TARGETS else "label_hard") >= 0.5
    used = (pl.col("actor") == "base") if cfg.base_only else pl.lit(True)
    frame = frame.with_columns(outcome.cast(pl.Float64).alias("outcome"), used.alias("used"))
    judged_outcomes = frame.filter("used")["outcome"]
    if target in L.STEP_TARGETS and judged_outcomes.n_unique() < 2:
        right = int(judged_outcomes.sum())
        raise L.SingleClassError(
            f"Refusing to train on {cfg.data}: the base agent's {'proposals' if target == 'proposal' else 'answers'} "
            f"are {'all right' if right else 'all wrong'} ({right} of {judged_outcomes.len()}{' base rows' if cfg.base_only else ''}), "
            "so there is no mistake to rank. Use a base agent that is sometimes right (with --env agile: an SFT "
            "model folder, `helpgate agile sft`; the untuned SmolLM2 does not write AGILE's function calls) or more episodes."
        )
    return frame, keys


@dataclass
class _Data:
    """The labelled steps dealt into folds (or a held-out split), in the forms both ways of fitting read."""

    frame: pl.DataFrame
    target: str
    label: str
    keys: list[str] | None
    split: Folds | None  # None: --folds 1, a held-out split
    train_ids: list[str]
    val_ids: list[str]
    train_frame: pl.DataFrame
    val_frame: pl.DataFrame
    train_episode_ids: list[str]
    train_episodes: list
    val_episodes: list
    train_target: torch.Tensor
    train_used: torch.Tensor
    row_fold: np.ndarray | None  # each training row's fold, with folds
    row_group: np.ndarray  # each training row's independent group: whole episodes stay together in CV
    wins: int
    failures: int


def _dealt(frame: pl.DataFrame, cfg: TrainConfig, target: str, keys: list[str] | None) -> _Data:
    """Deal the episodes into folds (``--folds``) or a training / held-out split, and say so."""
    folds = cfg.folds if cfg.folds is not None else 5
    if folds < 1:
        raise ValueError(f"folds={folds}: use 1 (a held-out split) or more (out-of-fold scores).")
    split = assign_folds(frame, folds, cfg.seed) if folds > 1 else None
    if split:
        train_ids, val_ids = sorted(split.fold), []
    else:
        train_ids, val_ids = L.split_episodes(frame, cfg.val_fraction, cfg.seed, cfg.success_threshold)
    label = L.LABEL_COLUMNS[target]
    train_frame = frame.filter(pl.col("episode_id").is_in(train_ids))
    val_frame = frame.filter(pl.col("episode_id").is_in(val_ids))
    # episodes_of and these columns share the (episode_id, step) order of the sorted frames.
    train_episode_ids, train_episodes = episodes_of(train_frame, cfg.tag_after)
    _, val_episodes = episodes_of(val_frame, cfg.tag_after)
    if split:
        row_group = np.array([split.group[e] for e in train_frame["episode_id"]])
    else:
        row_group = np.repeat(np.arange(len(train_episodes)), [len(states) for states, *_ in train_episodes])
    wins, failures = L.class_counts(frame, cfg.success_threshold)
    print(
        f"prm train: {frame['episode_id'].n_unique()} episodes ({wins} successes, {failures} failures), "
        f"{frame.height} steps ({int(frame['used'].sum())} used); "
        + (f"{split.k} folds by {split.how}" if split else f"{len(train_ids)} train / {len(val_ids)} validation episodes")
        + f"; target {label}, head {cfg.head}, "
        f"{'LoRA' if cfg.lora else 'fine-tuned whole' if is_encoder(cfg.model) else 'frozen backbone'} on {cfg.model}."
    )
    return _Data(
        frame, target, label, keys, split, train_ids, val_ids, train_frame, val_frame, train_episode_ids,
        train_episodes, val_episodes,
        train_target=torch.tensor(train_frame[label].to_numpy(), dtype=torch.float32),
        train_used=torch.from_numpy(train_frame["used"].to_numpy().copy()),
        row_fold=np.array([split.fold[e] for e in train_frame["episode_id"]]) if split else None,
        row_group=row_group, wins=wins, failures=failures,
    )


@dataclass
class _Fit:
    """What fitting gives the report: scores of every training and held-out row, and how the fit went."""

    oof_scores: np.ndarray | None  # each training row scored by the copy that did not see it (None: no folds)
    train_scores: np.ndarray  # THE model's (in fold)
    val_scores: np.ndarray  # THE model's on the held-out episodes (none with folds)
    l2: float | None
    losses: list[float]
    features: dict[str, np.ndarray] | None = None  # frozen backbone: per episode, saved for `prm score`
    fine_tune: dict | None = None  # trained verifier: seconds per fold


def _fit_frozen(prm, data: _Data, cfg: TrainConfig) -> _Fit:
    """Frozen backbone: cache features once, fit the head by L-BFGS: one per fold, then THE model."""
    frame, keys = data.frame, data.keys
    if cfg.hidden:
        features = episode_features(prm, frame, cfg)
    else:  # the head reads no hidden state: one empty row per step, and no backbone pass
        counts = frame.group_by("episode_id", maintain_order=True).len()
        features = {e: np.zeros((n, 0), dtype=np.float32) for e, n in counts.iter_rows()}

    def stacked(part: pl.DataFrame) -> torch.Tensor:
        """The head's inputs of ``part``'s rows: hidden states (then signals, when read)."""
        ids = part["episode_id"].unique(maintain_order=True)
        if not len(ids):
            return torch.zeros(0, prm.settings.head_width)
        hidden = torch.from_numpy(np.concatenate([features[e] for e in ids]))
        return prm.head_input(hidden, signal_matrix(part, keys) if keys else None,
                              part["state_text"].to_list() if cfg.question_vector else None)

    train_x, val_x = stacked(data.train_frame), stacked(data.val_frame)
    head = prm.head.cpu()
    used_rows = data.train_used.numpy()

    def fitted_head(rows: np.ndarray, losses: list | None = None):
        """A copy of the initial head fitted on ``rows`` (L2 by cross-validation within them)."""
        x, y = train_x[rows], data.train_target[rows]
        l2, table = (cfg.l2, None) if cfg.l2 is not None else cross_validated_l2(
            head, x, y, data.row_group[rows], cfg.head_steps, cfg.seed)
        return fit_head(copy.deepcopy(head), x, y, l2, cfg.head_steps, losses), l2, table

    oof_scores, fold_heads = None, []
    if data.split:
        # One head per fold, fitted without the fold's episodes, scores that fold only.
        oof_scores = np.full(data.train_frame.height, np.nan)
        for k in range(data.split.k):
            fold_head, _, _ = fitted_head(used_rows & (data.row_fold != k))
            fold_heads.append(fold_head)
            held = data.row_fold == k
            with torch.no_grad():
                oof_scores[held] = torch.sigmoid(fold_head(train_x[held])).numpy()
    # THE model (the gate's): one head on every training episode, or (fold_mean) the fold heads' mean.
    losses_seen: list[float] = []
    all_data, l2, cv_table = fitted_head(used_rows, losses_seen)
    head.load_state_dict(all_data.state_dict())
    if cfg.fold_mean:
        head = FoldMeanHead(fold_heads)
        prm.head, prm.settings.fold_heads = head, len(fold_heads)
    if cv_table:
        print(f"prm train: l2 {l2:g} chosen by 3-fold CV over training episodes (log loss {cv_table})")
    with torch.no_grad():
        train_scores = torch.sigmoid(head(train_x)).numpy()
        val_scores = torch.sigmoid(head(val_x)).numpy()
    head.to(prm.device)
    return _Fit(oof_scores, train_scores, val_scores, l2, losses_seen, features=features)


def _fit_fine_tuned(prm, data: _Data, cfg: TrainConfig, rng: np.random.Generator) -> _Fit:
    """LoRA adapters or a whole encoder, trained end to end: one copy per fold (``prm.training.finetune``)."""
    from prm.training.finetune import fine_tune

    train_frame = data.train_frame
    episode_fold = np.array([data.split.fold[e] for e in data.train_episode_ids]) if data.split else None
    fold_dir = Path(cfg.out) / "fold_scores"
    shutil.rmtree(fold_dir, ignore_errors=True)  # a previous run's folds must not read as this run's

    def save_fold(k: int, rows: np.ndarray, scores: np.ndarray, seconds: float) -> None:
        # Each fold's held-out scores as it finishes: a long CPU run stopped early keeps the folds it made.
        fold_dir.mkdir(parents=True, exist_ok=True)
        train_frame[rows].select("episode_id", "step", "outcome", "used").with_columns(
            pl.Series("prm_score_raw", scores), pl.lit(k).alias("fold"), pl.lit(seconds).alias("seconds"),
        ).write_parquet(fold_dir / f"fold{k}.parquet")

    tuned = fine_tune(prm, data.train_episodes, data.train_target.numpy(), data.train_used.numpy(), episode_fold,
                      data.row_group, cfg, rng, on_fold=save_fold)
    fine_tune_report = {"fold_seconds": tuned.fold_seconds, "all_data_seconds": tuned.all_seconds,
                        "mean_fold_seconds": round(float(np.mean(tuned.fold_seconds)), 2)
                        if tuned.fold_seconds else None}
    train_scores = np.concatenate(prm.score_episodes(data.train_episodes, cfg.batch_tokens, progress=cfg.progress))
    val_scores = (np.concatenate(prm.score_episodes(data.val_episodes, cfg.batch_tokens, progress=cfg.progress))
                  if data.val_episodes else np.zeros(0))
    return _Fit(tuned.oof, train_scores, val_scores, tuned.l2, tuned.losses, fine_tune=fine_tune_report)


def _report(prm, data: _Data, fit: _Fit, cfg: TrainConfig, started: float) -> tuple[dict, pl.DataFrame]:
    """Fit the calibrator (``prm.calibrator``) and make the quality report on out-of-fold (or held-out)
    scores; returns the report and the judged rows with their scores."""
    split, train_frame, val_frame = data.split, data.train_frame, data.val_frame
    judged_raw = (fit.oof_scores if split else fit.val_scores).astype(np.float64)
    judged_used = (train_frame if split else val_frame)["used"].to_numpy()
    judged_outcome = (train_frame if split else val_frame)["outcome"].to_numpy()
    method = cfg.calibration or default_method(int(judged_used.sum()))
    prm.calibrator = fit_calibrator(judged_raw[judged_used], judged_outcome[judged_used], method)
    if split:
        calibration_groups = data.row_fold
    else:  # no folds: 5 groups of held-out episodes
        group_of = {e: i % 5 for i, e in enumerate(sorted(set(data.val_ids)))}
        calibration_groups = np.array([group_of[e] for e in val_frame["episode_id"].to_list()], dtype=int)
    honest = cross_fitted(judged_raw[judged_used], judged_outcome[judged_used],
                          calibration_groups[judged_used], prm.calibrator.method)
    train_frame = train_frame.with_columns(pl.Series("prm_score", fit.train_scores.astype(np.float64)))
    if split:
        judged_frame = train_frame.with_columns(
            pl.Series("prm_score", fit.oof_scores), pl.Series("fold", data.row_fold, dtype=pl.Int64)
        )
        judged_rows = f"out of fold: every episode scored by the head of the {split.k - 1} folds without it"
    else:
        judged_frame = val_frame.with_columns(pl.Series("prm_score", fit.val_scores.astype(np.float64)))
        judged_rows = f"held-out episodes ({len(data.val_ids)}); training rows get in-fold scores"
    judged = judged_frame.filter("used")
    in_fold = train_frame.filter("used")
    groups = judged[cfg.group_by].cast(pl.String).to_list() if cfg.group_by else None
    losses_seen = fit.losses
    report = {
        "validation": quality.quality_report(
            judged["prm_score"], judged["outcome"], judged["step"].to_numpy(), groups, cfg.bins
        ),
        "validation_rows": judged_rows,
        "oof_auroc": None,
        "oof_auroc_per_type": None,
        "in_fold_auroc": quality.auroc(in_fold["prm_score"], in_fold["outcome"]),
        "in_fold": quality.summary(in_fold["prm_score"], in_fold["outcome"], cfg.bins),
        "signals": data.keys,
        "calibration": {"method": prm.calibrator.method, "fitted_on": int(judged_used.sum()),
                        "after": "each fold mapped by a calibrator fitted on the other folds"
                        if split else "held-out episodes in 5 groups, each mapped by the other 4"},
        "oof_brier": {"before": quality.brier(judged["prm_score"], judged["outcome"]),
                      "after": quality.brier(honest, judged["outcome"])},
        "oof_ece": {"before": quality.ece(judged["prm_score"], judged["outcome"], cfg.bins),
                    "after": quality.ece(honest, judged["outcome"], cfg.bins)},
        "folds": {"k": split.k, "by": split.how} if split else None,
        "outcome": {"process": "step reward >= 0.5", "proposal": "proposal reward >= 0.5",
                    "fatal": "not the step a failed episode ended on", "mc": "intervening here gains < 0.5"}.get(
            data.target, f"episode success >= {cfg.success_threshold}"),
        "rows": "actor == base" if cfg.base_only else "all",
        "episodes": {"train": len(data.train_ids), "validation": len(data.val_ids), "successes": data.wins,
                     "failures": data.failures},
        "target": data.label,
        "l2": fit.l2,
        "loss": {"first": losses_seen[0] if losses_seen else None, "last": losses_seen[-1] if losses_seen else None},
        "losses": losses_seen,
        "seconds": round(time.perf_counter() - started, 2),
        "fine_tune": fit.fine_tune,
        "config": dataclasses.asdict(cfg),
    }
    if split:
        report["oof_auroc"] = report["validation"]["auroc"]
        report["oof_auroc_per_type"] = _per_type_auroc(judged)
        report["oof_rows_per_type"] = _per_type_counts(judged)
    return report, judged_frame


def _save(prm, data: _Data, fit: _Fit, report: dict, judged_frame: pl.DataFrame, cfg: TrainConfig) -> None:
    """Write the model, the features and out-of-fold scores ``prm score`` reads, the split, the report and the
    scores it was made on to ``cfg.out``."""
    out = Path(cfg.out)
    prm.save(out, save_backbone=True if cfg.save_backbone else None)
    if fit.features is None:
        (out / FEATURES_FILE).unlink(missing_ok=True)  # the backbone moved: features of the fresh one are stale
    else:
        # `prm score` reads these instead of running the backbone again on the same episodes.
        last = data.frame.group_by("episode_id", maintain_order=True).agg(pl.col("prefix_key").last())
        content_hash = dict(zip(last["episode_id"], last["prefix_key"]))
        save_features(out / FEATURES_FILE, feature_key(prm, cfg.model, cfg.seed),
                      {e: (content_hash[e], fit.features[e]) for e in fit.features})
    if data.split:
        # `prm score` writes these for exactly these episodes (matched by their rendered text).
        judged_frame.select(
            "episode_id", "step", "fold",
            pl.Series("prm_score", prm.calibrator(fit.oof_scores)),
            pl.col("prm_score").alias("prm_score_raw"),
            pl.col("prefix_key").last().over("episode_id").alias("episode_hash"),
        ).write_parquet(out / OOF_FILE)
        (out / "split.json").write_text(json.dumps({"folds": data.split.fold, "by": data.split.how}) + "\n")
    else:
        (out / OOF_FILE).unlink(missing_ok=True)  # a stale file would be read by `prm score`
        (out / "split.json").write_text(json.dumps({"train": data.train_ids, "validation": data.val_ids}) + "\n")
    (out / "metrics.json").write_text(json.dumps(report, indent=2, default=float) + "\n")
    judged = judged_frame.filter("used")
    quality.reliability_plot(judged["prm_score"], judged["outcome"], out / "reliability.png", cfg.bins)
    keep = [c for c in ("episode_id", "step", "task_id", "actor", "reward", "success", "fold") if c in judged_frame.columns]
    judged_frame.select(*keep, "label_hard", "label_soft", "label_process", "outcome", "used", "prm_score").write_parquet(
        out / "validation_scores.parquet"
    )


def _signal_keys(frame: pl.DataFrame, cfg: TrainConfig) -> list[str] | None:
    """The agent signal keys (``--signals``) then the state feature keys (``--state-features``) the head
    reads, or None."""
    if cfg.word_features:
        from prm.inputs.words import word_keys

        keys = word_keys(frame["state_text"].to_list())
        if not keys:
            raise ValueError(f"word_features=True but the state texts of {cfg.data} share no word that some rows "
                             "lack; drop --word-features.")
        return keys
    agent = (_agent_signal_keys(frame, cfg) or []) + _view_keys(frame, cfg) + _evidence_keys(frame, cfg)
    if not cfg.state_features:
        return agent or None
    state = state_keys(frame)
    if not state:
        raise ValueError(f"state_features=True but {cfg.data} has no state features (column 'features' absent or "
                         "every row '{}'); collect from an environment that gives Observation.features.")
    if cfg.head != "value" or cfg.lora:
        raise ValueError("state_features=True needs the value head on a frozen backbone (--head value, no --lora).")
    return agent + state


def _proposal_text_keys(frame: pl.DataFrame, cfg: TrainConfig, flag: str, keys: tuple[str, ...]) -> list[str]:
    """``keys``, the head inputs read from the proposal's text (``--proposal-features``, ``--evidence-features``),
    once the data and the head can feed them: proposal mode, a value head on a frozen causal backbone."""
    if cfg.tag_after != "proposal" or "proposal_text" not in frame.columns:
        raise ValueError(f"{flag} reads the base agent's proposal: use --tag-after proposal on data "
                         "collected with --decide-after proposal.")
    if cfg.head != "value" or cfg.lora or is_encoder(cfg.model):
        raise ValueError(f"{flag} needs the value head on a frozen causal backbone (--head value, "
                         "no --lora, no encoder).")
    return list(keys)


def _view_keys(frame: pl.DataFrame, cfg: TrainConfig) -> list[str]:
    """The proposal-feature keys the head reads (``--proposal-features``, ``prm.inputs.visible``), or none."""
    if not cfg.proposal_features:
        return []
    from prm.inputs.visible import KEYS

    return _proposal_text_keys(frame, cfg, "--proposal-features", KEYS)


def _evidence_keys(frame: pl.DataFrame, cfg: TrainConfig) -> list[str]:
    """The evidence-feature keys the head reads (``--evidence-features``, ``prm.inputs.evidence``), or none."""
    if not cfg.evidence_features:
        return []
    from prm.inputs.evidence import KEYS

    return _proposal_text_keys(frame, cfg, "--evidence-features", KEYS)


def _agent_signal_keys(frame: pl.DataFrame, cfg: TrainConfig) -> list[str] | None:
    """The agent signal keys the head reads (``--signals``), or None."""
    keys = signal_keys(frame)
    # The signals describe this step's action: a tag before it (a gate deciding on the state alone)
    # must not read them, or training sees what the gate never has.
    if cfg.signals is None:
        return keys if keys and cfg.head == "value" and not cfg.lora and not is_encoder(cfg.model) \
            and cfg.tag_after != "state" else None
    if not cfg.signals:
        return None
    if cfg.tag_after == "state":
        raise ValueError("signals=True with --tag-after state: the signals describe the action the tag comes "
                         "before, which a gate deciding on the state does not have; use --tag-after proposal.")
    if not keys:
        raise ValueError(f"signals=True but {cfg.data} has no agent signals (column {SIGNALS_COLUMN!r} absent or "
                         "every row '{}'); collect with an agent that gives them (e.g. llm:smollm2) or drop --signals.")
    if cfg.head != "value" or cfg.lora or is_encoder(cfg.model):
        raise ValueError("signals=True needs the value head on a frozen causal backbone (--head value, no --lora, "
                         "no encoder); "
                         "drop --signals for this head.")
    return keys


def _per_type_counts(judged: pl.DataFrame) -> dict[str, dict[str, int]] | None:
    """Rows and positive outcomes per task kind: an AUROC over one or two positives says nothing."""
    if "task_id" not in judged.columns:
        return None
    kinds = np.array([task_type(t) or "" for t in judged["task_id"].to_list()])
    positive = judged["outcome"].to_numpy() >= 0.5
    found = {str(k): {"rows": int((kinds == k).sum()), "positives": int(positive[kinds == k].sum())}
             for k in sorted(set(kinds.tolist()) - {""})}
    return found or None


def _per_type_auroc(judged: pl.DataFrame, min_rows: int = 10) -> dict[str, float] | None:
    """AUROC per task kind named by the task ids (ProductQA: question type), for the report only."""
    if "task_id" not in judged.columns:
        return None
    kinds = np.array([task_type(t) or "" for t in judged["task_id"].to_list()])
    scores, outcomes = judged["prm_score"].to_numpy(), judged["outcome"].to_numpy()
    found = {
        str(k): quality.auroc(scores[kinds == k], outcomes[kinds == k])
        for k in sorted(set(kinds.tolist()) - {""})
        if int((kinds == k).sum()) >= min_rows
    }
    return found or None


def _create(cfg: TrainConfig, keys):
    """A fresh PRM on ``cfg.model``: a cross-encoder (``prm.verifiers.encoder``) or a causal LM
    (``prm.verifiers.model``)."""
    from prm.inputs.evidence import QUESTION_VECTOR_WIDTH
    from prm.verifiers.model import ProcessRewardModel, parse_dtype

    if is_encoder(cfg.model):
        from prm.verifiers.encoder import EncoderPRM

        return EncoderPRM.create_encoder(cfg.model, tag_after=cfg.tag_after, max_length=cfg.max_length,
                                         history=cfg.history, device=cfg.device, dtype=parse_dtype(cfg.dtype),
                                         seed=cfg.seed)
    return ProcessRewardModel.create(
        cfg.model,
        head=cfg.head,
        lora=cfg.lora,
        lora_r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        tag_after=cfg.tag_after,
        max_length=cfg.max_length,
        layers=cfg.layers,
        history=cfg.history,
        pooling=cfg.pooling,
        signal_keys=keys,
        hidden_inputs=cfg.hidden,
        question_vector=QUESTION_VECTOR_WIDTH if cfg.question_vector else 0,
        device=cfg.device,
        dtype=parse_dtype(cfg.dtype),
        seed=cfg.seed,
    )
