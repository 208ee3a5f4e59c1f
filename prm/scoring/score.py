"""Score every decision point of a trajectory folder with a trained PRM (adds ``prm_score``).

    helpgate prm score --data trajectories --model prm              # in place
    helpgate prm score --data trajectories --model prm --out scored # to another folder
    helpgate prm score --data trajectories --model prm --ray        # shards over Ray workers

Each episode is rendered once with a tag at every step and scored in ONE forward pass; windows
are length-bucketed into batches of about ``batch_tokens`` padded tokens and run under
``torch.inference_mode`` (bf16 + SDPA on a GPU, via ``agile.models``).

Shards are streamed one at a time. By default the output is the input folder: each shard is
rewritten in place atomically (temp file + rename) with a ``prm_score`` column added (an existing
one is replaced). With ``--out`` the scored shards go to that folder and the input is untouched; an
``--out`` that is the input under another name, another collection or a folder of other files is
refused (``trajectories.outputs.score_out``).
A progress manifest, ``prm_score.manifest.json`` in the output folder, records each finished shard
with the fingerprint of the PRM that scored it (``prm.verifiers.fingerprint``) and its SHA-256, and
marks a shard pending while it is rewritten, so a killed run resumes where it stopped: a rerun scores
every shard this PRM did not (a re-score with another PRM cut off between shards is finished by one
PRM, never left mixed), and readers of the scores refuse a folder that names two PRMs or a pending
shard (``trajectories.scored_by``). Input shards whose bytes their manifests did not record (another
run's shard copied in, an edited one) are refused before any scoring (``trajectories.content``).

Training episodes get their out-of-fold score: ``prm train`` saved, in ``oof_scores.parquet``,
each training episode's scores from the fold head that did not see it, and an episode found
there with unchanged text is given those, so solve, distill and every calibrated baseline fit on
scores of a model that never saw the episode, as the gate's scores are online. Every other
episode (new data, or a training episode whose text changed) is scored by the saved all-data
model. A PRM trained on a frozen backbone also keeps the features it computed
(``features.npz``); episodes found there with unchanged text are scored by the head alone, so
no backbone pass is spent on them.

A PRM trained with the agent's signals (``prm.inputs.signals``) reads them from the ``proposal_signals``
column (absent column or keys: missing). A PRM with a calibrator (``calibration.json``,
``prm.verifiers.calibration``) writes calibrated probabilities, the out-of-fold ones included (``prm
train`` saves those calibrated), so the table's bins and the gate's scores mean the same.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
import torch

from prm.data.episodes import FEATURES_FILE, OOF_FILE, Validator, episodes_of, score_columns
from prm.inputs.signals import signal_matrix
from prm.verifiers.fingerprint import prm_fingerprint
from prm.verifiers.model import read_settings
from trajectories.content import check_content, collection_id
from trajectories.files import sha256_of, write_atomic
from trajectories.manifest import MANIFEST as COLLECTION_MANIFEST
from trajectories.manifest import SCORE_MANIFEST, Manifest
from trajectories.outputs import out_folder, score_out
from trajectories.scored_by import check_one_prm
from trajectories.shards import read_shard, shard_paths, write_shard

MANIFEST = SCORE_MANIFEST


@dataclass
class ScoreConfig:
    data: str = "trajectories"
    """Folder of trajectory Parquet shards to score."""
    model: str = "prm"
    """PRM folder written by `prm train`."""
    out: str | None = None
    """Folder for the scored shards; by default the shards in --data are rewritten in place."""
    batch_tokens: int = 16384
    """Padded tokens per forward pass; episodes of similar length are packed up to this budget."""
    max_length: int | None = None
    """Context cap in tokens (default: the model's); longer episodes are cut from the left."""
    device: str | None = None
    """Torch device (default: cuda when available, else cpu)."""
    dtype: Literal["bf16", "fp16", "fp32"] | None = None
    """bf16, fp16 or fp32 (default: bf16 on GPU, fp32 on CPU)."""
    resume: bool = True
    """Skip shards the progress manifest records as scored by this same model."""
    ray: bool = False
    """Spread shards over Ray workers (one per GPU, else CPU workers)."""
    ray_address: str | None = None
    """Ray cluster to join (default: the running one, or a new local one)."""
    ray_workers: int | None = None
    """Number of Ray workers (default: one per GPU, else one per CPU of the cluster)."""
    progress: bool = True
    """Show progress bars with tokens/s."""
    allow_incomplete: bool = False
    """Read a trajectory folder whose manifest is missing or says complete: false (a collection killed part way)
    as it is, instead of refusing it; recorded in the output."""


def score_frame(prm, frame: pl.DataFrame, batch_tokens: int = 16384, progress: bool = False,
                saved_features: Path | None = None, out_of_fold: Path | None = None) -> pl.DataFrame:
    """``frame`` (rows in any order) with a ``prm_score`` column, row order kept.

    ``out_of_fold``: the out-of-fold scores that ``prm train`` saved; episodes found there with the
    same rendered text get those. ``saved_features``: the frozen backbone's features that ``prm
    train`` saved; other episodes found there are scored by the head alone (no backbone pass).
    """
    frame = frame.drop("prm_score", strict=False).with_row_index("_row")
    ordered = frame.sort(["episode_id", "step"])
    ids, episodes = episodes_of(ordered, prm.settings.tag_after)
    signals = _episode_signals(prm, ordered, episodes)
    held_out = _out_of_fold(prm, ids, episodes, out_of_fold)
    cached = _cached_features(prm, [e for e in ids if e not in held_out],
                              [x for e, x in zip(ids, episodes) if e not in held_out], saved_features)
    todo = [i for i, e in enumerate(ids) if e not in cached and e not in held_out]
    computed = prm.score_episodes([episodes[i] for i in todo], batch_tokens=batch_tokens, progress=progress,
                                  signals=[signals[i] for i in todo])
    scores = dict(zip(todo, computed))
    scores |= {i: held_out[e] for i, e in enumerate(ids) if e in held_out}
    if cached:
        head = prm.head
        with torch.inference_mode():
            for i, e in enumerate(ids):
                if e in cached:
                    x = torch.from_numpy(cached[e]).to(next(head.parameters()).device)
                    scores[i] = prm.probabilities(head(prm.head_input(x, signals[i], list(episodes[i][0]))))
    scores = [scores[i] for i in range(len(ids))]
    flat = np.concatenate(scores).astype(np.float64) if scores else np.zeros(0)
    ordered = ordered.with_columns(pl.Series("prm_score", flat, dtype=pl.Float64))
    return ordered.sort("_row").drop("_row")


def _episode_signals(prm, ordered: pl.DataFrame, episodes) -> list:
    """Per episode, its steps' signal rows for a PRM that reads signals (else None each)."""
    keys = getattr(prm.settings, "signal_keys", None)
    if not keys:
        return [None] * len(episodes)
    matrix = signal_matrix(ordered, keys)
    return np.split(matrix, np.cumsum([len(episode[0]) for episode in episodes])[:-1]) if episodes else []


def _content(prm, ids, episodes) -> dict[str, str]:
    """Each episode's rendered-text hash (the last prefix key), as ``prm train`` recorded it."""
    from prm.inputs.render import prefix_keys

    tag_after = prm.settings.tag_after
    return {e: prefix_keys(states, actions, tag_after, *proposals)[-1]
            for e, (states, actions, *proposals) in zip(ids, episodes)}


def _out_of_fold(prm, ids, episodes, path: Path | None) -> dict[str, np.ndarray]:
    """Saved out-of-fold scores of the episodes whose text and step count are unchanged."""
    if path is None or not path.exists() or not ids:
        return {}
    content = _content(prm, ids, episodes)
    lengths = {e: len(states) for e, (states, *_) in zip(ids, episodes)}
    stored = (
        pl.read_parquet(path)
        .filter(pl.col("episode_id").is_in(ids))
        .sort(["episode_id", "step"])
        .group_by("episode_id", maintain_order=True)
        .agg(pl.col("episode_hash").first(), pl.col("prm_score"))
    )
    return {
        e: np.asarray(scores, dtype=np.float64)
        for e, h, scores in zip(stored["episode_id"], stored["episode_hash"], stored["prm_score"])
        if content[e] == h and len(scores) == lengths[e]
    }


def _cached_features(prm, ids, episodes, saved_features: Path | None) -> dict[str, np.ndarray]:
    if saved_features is None or not saved_features.exists() or prm.settings.lora or prm.settings.encoder:
        return {}
    from prm.training.train import load_features

    content = _content(prm, ids, episodes)
    return {e: x for e, (_, x) in load_features(saved_features, None, content).items()}


def score_shard(
    prm,
    source: str | os.PathLike,
    target: str | os.PathLike,
    batch_tokens: int = 16384,
    validate: Validator | None = None,
    progress: bool = False,
    saved_features: Path | None = None,
    out_of_fold: Path | None = None,
) -> dict:
    """Read one shard, score it, write it to ``target`` atomically; returns rows/tokens/seconds."""
    start = time.perf_counter()
    frame = read_shard(source, score_columns(prm.settings.tag_after), whole_episodes=True)
    frame = frame if validate is None else validate(frame, str(source))
    prm.last_run = {}
    scored = score_frame(prm, frame, batch_tokens, progress, saved_features, out_of_fold)
    write_shard(scored, target, require=(*score_columns(prm.settings.tag_after), "prm_score"))
    stat = Path(target).stat()
    return {
        "rows": scored.height,
        "tokens": prm.last_run.get("tokens", 0),
        "seconds": time.perf_counter() - start,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
    }


def plan(cfg: ScoreConfig) -> tuple[Path, list[tuple[Path, Path]], list[Path], Manifest]:
    """(output folder, shards to score as (source, target), shards skipped, progress manifest).

    Checked before any work: the input's shards hold the bytes their manifests recorded, and ``--out`` is this
    collection's own output (``trajectories.outputs.score_out``). A shard counts as scored when the manifest
    records it, not pending, scored by this PRM (its fingerprint in ``config.prm``), with the bytes it holds:
    another PRM's shard, or one rewritten since (re-collected), is scored again."""
    data = Path(cfg.data)
    out = data if cfg.out is None else out_folder(cfg.out, "runs/demo/scored")  # '' is refused, not read as in place
    sources = shard_paths(cfg.data, cfg.allow_incomplete)  # the text as given: '' is refused, not read as the current folder
    if data.is_dir():
        check_content(data, sources)  # another run's shard copied over one of ours is refused before it is scored
    score_out(out, data)
    if out != data and out.resolve().is_relative_to(data.resolve()):  # --out inside --data: not a source
        sources = [s for s in sources if not s.resolve().is_relative_to(out.resolve())]
    tag_after = read_settings(cfg.model).tag_after  # not a PRM folder: refused before a manifest is written
    for source in sources:  # nor a shard it cannot score (a null state_text): refused before any file is written
        read_shard(source, score_columns(tag_after), whole_episodes=True)
    fingerprint = prm_fingerprint(cfg.model)
    # Keyed by nothing that changes: each shard records its own PRM; an older release's "model" key is dropped.
    manifest = Manifest.open(out, {}, name=MANIFEST, ignore=("model", "collection", "prm"), own_folder=False)
    targets = {source: out / (source.relative_to(data) if data.is_dir() else source.name) for source in sources}
    names = {target.relative_to(out).as_posix() for target in targets.values()}
    # What this run writes: entries of shards no longer there are not part of it.
    manifest.shards = {name: entry for name, entry in manifest.shards.items() if name in names}
    manifest.config = {"collection": collection_id(data), "prm": fingerprint}
    manifest.save()
    jobs, skipped = [], []
    for source, target in targets.items():
        if cfg.resume and _scored(manifest, target.relative_to(out).as_posix(), target, fingerprint):
            skipped.append(target)
        else:
            jobs.append((source, target))
    return out, jobs, skipped, manifest


def _scored(manifest: Manifest, name: str, target: Path, fingerprint: str) -> bool:
    entry = manifest.shards.get(name) or {}
    return (not entry.get("pending") and entry.get("prm") == fingerprint and target.is_file()
            and entry.get("sha256") == sha256_of(target))


@contextmanager
def pending(manifest: Manifest, out: Path, targets: list[Path]):
    """Mark ``targets`` pending (being rewritten: a kill leaves the mark, which readers of the scores refuse and a
    rerun scores again); on an error, put back what was recorded before for a shard whose bytes did not change
    (one rewritten before the error stays pending: its old record would call it edited)."""
    before = {}
    for target in targets:
        name = target.relative_to(out).as_posix()
        before[name] = (manifest.shards.get(name), sha256_of(target) if target.is_file() else None, target)
        manifest.shards[name] = {"prm": manifest.config["prm"], "pending": True}
    manifest.save()
    try:
        yield
    except BaseException:
        for name, (entry, bytes_before, target) in before.items():
            unchanged = (sha256_of(target) if target.is_file() else None) == bytes_before
            if (manifest.shards.get(name) or {}).get("pending") and unchanged:
                if entry is None:
                    manifest.shards.pop(name, None)
                else:
                    manifest.shards[name] = entry
        manifest.save()
        raise


def record(manifest: Manifest, out: Path, target: Path, stats: dict) -> None:
    """Mark one shard finished, with the PRM that scored it (called by the single driver process only, so no
    write races); its SHA-256 is recorded by ``Manifest.mark_done``."""
    manifest.mark_done(target.relative_to(out).as_posix(), rows=stats["rows"], prm=manifest.config["prm"])


def carry_collection_manifest(data: Path, out: Path) -> None:
    """Scored into another folder: once every shard is scored, the collection's ``manifest.json`` goes
    beside them (same shards, rows and episodes), so later stages read ``out`` as the collection it is,
    finished or not; a scoring cut short leaves none, and is refused as unfinished."""
    source = data / COLLECTION_MANIFEST
    if data.is_dir() and out.resolve() != data.resolve() and source.is_file():
        write_atomic(out / COLLECTION_MANIFEST, lambda path: shutil.copyfile(source, path))


def run_score(cfg: ScoreConfig, validate: Validator | None = None) -> dict:
    """Score every shard of ``cfg.data``; returns counts and throughput."""
    from prm.verifiers.load import load_prm
    from prm.verifiers.model import parse_dtype

    out, jobs, skipped, manifest = plan(cfg)
    if skipped:
        print(f"prm score: {len(skipped)} shards already scored by this model, skipping them.")
    start = time.perf_counter()
    totals = {"rows": 0, "tokens": 0}
    if jobs and cfg.ray:
        from prm.scoring.ray_score import score_with_ray

        with pending(manifest, out, [target for _, target in jobs]):  # workers write; the driver alone records
            for target, stats in score_with_ray(cfg, jobs, score_shard, validate):
                record(manifest, out, target, stats)
                totals["rows"] += stats["rows"]
                totals["tokens"] += stats["tokens"]
    elif jobs:
        prm = load_prm(cfg.model, device=cfg.device, dtype=parse_dtype(cfg.dtype), merge_lora=True)
        if cfg.max_length:
            prm.settings.max_length = cfg.max_length
        for source, target in jobs:
            with pending(manifest, out, [target]):
                stats = score_shard(prm, source, target, cfg.batch_tokens, validate, cfg.progress,
                                    saved_features=Path(cfg.model) / FEATURES_FILE,
                                    out_of_fold=Path(cfg.model) / OOF_FILE)
                record(manifest, out, target, stats)
            totals["rows"] += stats["rows"]
            totals["tokens"] += stats["tokens"]
    seconds = time.perf_counter() - start
    check_one_prm(out)  # what it leaves is one PRM's scores, none pending
    carry_collection_manifest(Path(cfg.data), out)
    summary = {
        "scored": len(jobs),
        "skipped": len(skipped),
        "rows": totals["rows"],
        "tokens": totals["tokens"],
        "seconds": round(seconds, 3),
        "tokens_per_s": round(totals["tokens"] / seconds, 1) if jobs and seconds > 0 else None,
        "out": str(out),
    }
    print(f"prm score: {summary}")
    return summary
