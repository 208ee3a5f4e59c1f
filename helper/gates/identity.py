"""What makes a helper folder one unit: the horizon, the feature names and the PRM it was built with.

``HelperGate.save`` records four fields in ``helper.json`` and ``HelperGate.load`` checks them:

- ``horizon``: the longest episode (decision points) of the training rows (``trained_on``);
  ``serve-gate`` takes its horizon from it and refuses longer requests;
- ``feature_names`` / ``fallback_feature_names``: the inputs of ``classifier/`` and ``fallback/``;
  a folder whose classifier files read other inputs (files of two distills mixed) is refused;
- ``prm_fingerprint``: a hash of the PRM folder's files that decide its scores
  (``prm.verifiers.fingerprint``); a PRM that loads but is not the one the helper was distilled with is
  refused, since its scores would be read as if they were;
- ``classifier_files``: a hash of each file of ``classifier/`` and ``fallback/`` as saved (big files by their
  size and edges, as the PRM's); a folder where one differs (files of two distills mixed, even with the same
  feature names, or a file edited) is refused naming the file.

A folder written before these fields existed has none of them: it loads with one warning naming
the missing fields and is checked for nothing it does not record (refusing it would strand every
helper already deployed, and the fields can only be recorded by distilling again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

# prm_fingerprint's home: prm score records it too; imported from here still.
from prm.verifiers.fingerprint import add_contents, prm_fingerprint  # noqa: F401 (prm_fingerprint re-exported)

FIELDS = ("horizon", "feature_names", "prm_fingerprint", "classifier_files")
MODEL_FOLDERS = ("classifier", "fallback")
"""The folders of a helper's classifiers, whose files ``classifier_files`` records."""


class UntrustedPrm(ValueError):
    """The helper's PRM is missing, does not load, or is not the one it was distilled with."""


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of one file: its size and its bytes (its first and last MiB past ``prm.verifiers.fingerprint.FULL_HASH_BYTES``)."""
    size = path.stat().st_size
    digest = hashlib.sha256(f"{size}\0".encode())
    add_contents(digest, path, size)
    return "sha256:" + digest.hexdigest()


def classifier_files(directory: str | Path) -> dict[str, str]:
    """``{path relative to the helper folder: file_digest}`` of every file of its classifier folders."""
    directory = Path(directory)
    return {path.relative_to(directory).as_posix(): file_digest(path)
            for folder in MODEL_FOLDERS if (directory / folder).is_dir()
            for path in sorted((directory / folder).rglob("*")) if path.is_file()}


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
    check_contents(config_path, config)


def check_contents(config_path: Path, config: dict) -> None:
    """Refuse a classifier file that is not the one ``helper.json`` recorded (none recorded: an older folder)."""
    wanted = config.get("classifier_files")
    if wanted is None:
        return
    if not isinstance(wanted, dict):
        raise ValueError(f"{config_path}: classifier_files={wanted!r} is not a mapping of files to hashes; re-run "
                         "`helpgate distill` into an empty folder.")
    found = classifier_files(config_path.parent)
    for name in sorted(set(wanted) | set(found)):
        if wanted.get(name) != found.get(name):
            what = ("is missing" if name not in found else "was not saved with this helper.json" if name not in wanted
                    else f"hashes to {found[name][:19]}… where helper.json records {wanted[name][:19]}…")
            raise ValueError(f"{config_path}: {name} {what} (classifier_files): the folder mixes files of two "
                             "distills or was edited; re-run `helpgate distill` into an empty folder.")


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
