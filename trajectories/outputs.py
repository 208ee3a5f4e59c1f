"""Where a command may write: a folder of its own, never its own input, never another run's.

Every command that writes a folder calls these before any work, with ``--out`` as given (text):

- ``out_folder(out)``: the folder named; '' or blanks are refused (``Path('')`` is the current folder, where
  collect, solve, distill, evaluate, prm train and sweep wrote their files among whatever was there).
- ``outside_inputs(out, inputs)``: refused when ``out`` is an input folder or lies inside one (links
  followed): ``solve --out`` or ``prm train --out`` equal to ``--data`` wrote Parquet into the collection,
  which every reader then refused.
- ``not_another_run(out, kind)``: refused when ``out`` is a folder another kind of command wrote (a collection, a
  PRM, a solve, a helper, a sweep or an evaluation: its marker file is there), or lies inside a collection, PRM,
  solve or helper folder: ``solve --out`` a helper folder overwrote its ``policy.npz``, ``distill --out`` a collection
  left Parquet that every reader then refused, ``sweep --out`` a helper mixed its tables with the helper's files.
- ``score_out(out, data)``: ``prm score --out``: not ``--data`` under another name (a link to it scored nothing
  and said done), not another collection (its shards and manifest were overwritten), not a folder of other files.
- ``not_a_finished_stage(out)``: not a pipeline run's finished stage (``pipeline.json`` beside it and its
  ``.done``): a sweep written there no longer matched what the run's settings and marker said.

They live on the floor of the house (``trajectories``) because every command that writes, ``prm`` and
``helper`` alike, may import it.
"""

from __future__ import annotations

import os
from pathlib import Path

from trajectories.content import collection_id
from trajectories.manifest import MANIFEST, SCORE_MANIFEST, load_manifest

Text = str | os.PathLike


def out_folder(out: Text | None, example: str = "runs/demo/out") -> Path:
    """``out`` as a folder, or ``ValueError`` (one line) when it is empty or blank."""
    if out is None or not str(out).strip():
        raise ValueError(f"out={'' if out is None else str(out)!r}: name the output folder, e.g. --out {example} (an "
                         "empty name is the current folder, where the run's files would mix with what is there).")
    return Path(out)


def outside_inputs(out: Text, inputs: dict[str, Text | None]) -> None:
    """Refuse an ``out`` that is, or lies inside, one of ``inputs`` (option -> path; unset ones skipped)."""
    target = Path(out).resolve()
    for option, value in inputs.items():
        if value is None or not str(value).strip():
            continue
        source = Path(value).resolve()
        if target == source or target.is_relative_to(source):
            where = "" if target == source else "inside "
            raise ValueError(f"out={str(out)!r} is {where}{option} {value}: the command would write its files into its "
                             f"own input, which every reader would then refuse; choose an --out outside {value}.")


MARKERS = {"collection": (MANIFEST, SCORE_MANIFEST), "PRM": ("prm_config.json",), "solve": ("solve.json",),
           "helper": ("helper.json",), "sweep": ("sweep.csv", "summary.json"), "evaluation": ("evaluate.csv",)}
"""Each kind of output folder and the files that mark it (written by ``collect``/``prm score``, ``prm train``,
``solve``, ``distill``, ``sweep``, ``evaluate``)."""
HOLDS_OTHERS = ("collection", "PRM", "solve", "helper")
"""Kinds whose folders no other command's output may lie inside (their readers list or hash what they hold)."""


def not_another_run(out: Text, kind: str) -> Path:
    """``out`` as a path, or ``ValueError`` (one line) when it is a folder of another kind than ``kind`` (a key of
    ``MARKERS``: its marker file is there) or lies inside a folder of one of ``HOLDS_OTHERS`` (links followed)."""
    target = Path(out).resolve()
    for folder in (target, *target.parents):
        for other, markers in MARKERS.items():
            if folder == target and other == kind or folder != target and other not in HOLDS_OTHERS:
                continue
            marker = next((folder / name for name in markers if (folder / name).is_file()), None)
            if marker is not None:
                where = "" if folder == target else "inside "
                raise ValueError(f"out={str(out)!r} is {where}{folder}, a {other} folder ({marker.name} is there): "
                                 f"the {kind} would overwrite or mix with another command's files; choose a new or "
                                 "empty --out.")
    return Path(out)


def score_out(out: Path, data: Path) -> None:
    """Refuse a ``prm score --out`` that is ``data`` under another name, another collection, or a folder of
    other files (``out == data``: scoring in place, allowed)."""
    if out == data:
        return
    if out.resolve() == data.resolve():
        raise ValueError(f"out={str(out)!r} is --data {data} under another name (a link or another spelling): it would "
                         f"read and write the same shards; leave --out out to score {data} in place, or name a new "
                         "folder.")
    if not out.is_dir() or not any(not p.name.startswith(".") for p in out.iterdir()):
        return  # new or empty: ours
    own, collection = out / SCORE_MANIFEST, out / MANIFEST
    if own.is_file():
        recorded = load_manifest(own).get("config", {}).get("collection")
        if recorded is not None and recorded != collection_id(data):
            raise ValueError(f"{own}: {out} holds the scores of another collection than {data}; scoring into it would "
                             "overwrite them: choose a new --out (or delete that folder).")
    if collection.is_file():
        ours = data / MANIFEST
        if not ours.is_file() or load_manifest(collection).get("shards") != load_manifest(ours).get("shards"):
            raise ValueError(f"{collection}: {out} holds another collection than {data} (its manifest.json lists other "
                             "shards); scoring into it would overwrite its shards and manifest: choose a new --out.")
    elif not own.is_file():
        raise ValueError(f"{out} already holds files but no {SCORE_MANIFEST}: it was not written by prm score; "
                         "choose an empty or new --out folder.")


def not_a_finished_stage(out: Path) -> Path:
    """``out``, or ``ValueError`` when it is the finished stage of a pipeline run (its ``.done``, and
    ``pipeline.json`` in the folder above): writing there would leave the run's marker and settings describing
    files they no longer match."""
    run = out.parent
    if (out / ".done").is_file() and (run / "pipeline.json").is_file():
        raise ValueError(f"{out}: the finished {out.name} stage of the pipeline run in {run} (its .done and "
                         "pipeline.json would no longer describe it); choose another --out, or rerun that pipeline "
                         "with --redo.")
    return out
