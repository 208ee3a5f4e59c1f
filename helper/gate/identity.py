"""What makes a helper folder one unit: the horizon, the feature names and the PRM it was built with.

``HelperGate.save`` records three fields in ``helper.json`` and ``HelperGate.load`` checks them:

- ``horizon``: the longest episode (decision points) of the training rows (``trained_on``);
  ``serve-gate`` takes its horizon from it and refuses longer requests;
- ``feature_names`` / ``fallback_feature_names``: the inputs of ``classifier/`` and ``fallback/``;
  a folder whose classifier files read other inputs (files of two distills mixed) is refused;
- ``prm_fingerprint``: a hash of the PRM folder's files that decide its scores (``prm_config.json``,
  the head, the calibration map, the adapter and a saved backbone); a PRM that loads but is not
  the one the helper was distilled with is refused, since its scores would be read as if they were.

A file of at most ``FULL_HASH_BYTES`` is hashed whole; a larger one (a saved backbone's weights)
by its size and its first and last MiB, so a load never reads gigabytes to check a folder: a
retrained or replaced backbone changes those (its header and its last tensors), while rehashing
all of it would cost seconds on every start.

A folder written before these fields existed has none of them: it loads with one warning naming
the missing fields and is checked for nothing it does not record (refusing it would strand every
helper already deployed, and the fields can only be recorded by distilling again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

FIELDS = ("horizon", "feature_names", "prm_fingerprint")
FULL_HASH_BYTES = 64 << 20
EDGE_BYTES = 1 << 20
# The PRM files that decide its scores; metrics, plots and out-of-fold tables do not.
PRM_FILES = ("prm_config.json", "head.safetensors", "calibration.json")
PRM_FOLDERS = ("adapter", "backbone")


class UntrustedPrm(ValueError):
    """The helper's PRM is missing, does not load, or is not the one it was distilled with."""


def prm_fingerprint(directory: str | Path) -> str:
    """``sha256:<hex>`` over the PRM folder's score-deciding files (names, sizes, contents)."""
    directory = Path(directory)
    files = [directory / name for name in PRM_FILES if (directory / name).is_file()]
    for folder in PRM_FOLDERS:
        if (directory / folder).is_dir():
            files += sorted(p for p in (directory / folder).rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(directory).as_posix()}\0{size}\0".encode())
        with path.open("rb") as handle:
            if size <= FULL_HASH_BYTES:
                digest.update(handle.read())
            else:
                digest.update(handle.read(EDGE_BYTES))
                handle.seek(size - EDGE_BYTES)
                digest.update(handle.read(EDGE_BYTES))
    return "sha256:" + digest.hexdigest()


def read_features(names: Sequence[str] | None) -> list[str]:
    """The observation feature keys that classifier inputs ``names`` read (``f_<key>``)."""
    return [name[2:] for name in names or () if name.startswith("f_")]


def recorded(horizon: int | None, classifier, fallback, prm: str | Path | None) -> dict:
    """The identity fields of a helper folder, for ``helper.json``."""
    return {"horizon": None if horizon is None else int(horizon),
            "feature_names": list(getattr(classifier, "feature_names", None) or []),
            "fallback_feature_names": None if fallback is None else list(fallback.feature_names),
            "prm_fingerprint": prm_fingerprint(prm) if prm and (Path(prm) / "prm_config.json").is_file() else None}


def horizon_of(config: dict) -> int | None:
    """The recorded training horizon (``trained_on`` of an older folder as the second source)."""
    value = config.get("horizon", (config.get("trained_on") or {}).get("horizon"))
    return None if value is None else int(value)


def missing_fields(config: dict) -> list[str]:
    """The identity fields an older ``helper.json`` does not record."""
    return [name for name in FIELDS if name not in config]


def check_files(config_path: Path, config: dict, classifier, fallback) -> None:
    """Refuse a folder whose classifier files read other inputs than ``helper.json`` records."""
    horizon = config.get("horizon")
    if horizon is not None and (not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1):
        raise ValueError(f"{config_path}: horizon={horizon!r} is not a positive whole number; re-run "
                         "`helpgate distill` to write the folder again.")
    trained = (config.get("trained_on") or {}).get("horizon")
    if horizon is not None and trained is not None and int(trained) != horizon:
        raise ValueError(f"{config_path}: horizon={horizon} but trained_on.horizon={trained}: the file was "
                         "edited or mixed; re-run `helpgate distill` to write the folder again.")
    for field, model, folder in (("feature_names", classifier, "classifier"),
                                 ("fallback_feature_names", fallback, "fallback")):
        wanted, names = config.get(field), getattr(model, "feature_names", None)
        if wanted is None or names is None:
            continue
        if list(wanted) != list(names):
            raise ValueError(f"{config_path}: {field}={list(wanted)} but {folder}/ reads {list(names)}: the folder "
                             "mixes files of two distills; re-run `helpgate distill` into an empty folder.")


def check_prm(config_path: Path, config: dict, prm_path: str) -> None:
    """Refuse a PRM folder whose fingerprint differs from the recorded one (None recorded: no check)."""
    wanted = config.get("prm_fingerprint")
    if not wanted:
        return
    found = prm_fingerprint(prm_path)
    if found != wanted:
        raise UntrustedPrm(f"{config_path}: prm_fingerprint={wanted[:19]}… but the PRM at {prm_path} hashes to "
                           f"{found[:19]}…: it is not the PRM this helper was distilled with (retrained or "
                           "replaced). Restore that PRM, or re-run `helpgate distill` with this one.")
