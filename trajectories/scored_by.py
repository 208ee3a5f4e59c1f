"""Which PRM scored each shard: a folder read for its scores must be scored by one PRM, to the end.

``prm score`` records in ``prm_score.manifest.json``, for each shard it scored, the fingerprint of the PRM
(``prm``: ``prm.verifiers.fingerprint``), and marks a shard ``pending`` while it rewrites it. A re-score with
another PRM cut off between shards leaves shards of both, and a solve would then bin two PRMs' scores as one;
``check_one_prm`` refuses such a folder when its scores are read, in one line naming a shard and what to do:

- a shard marked pending (prm score was killed while rewriting it);
- shards that name two PRMs (a re-score cut off between shards);
- a shard holding ``prm_score`` that the manifest does not list (scored by a run the manifest no longer records,
  as an older release's restarted re-score left it).

A folder without ``prm_score.manifest.json`` (scores written by one's own code, a cross-fit fold's rows), or whose
entries record no PRM (an older release), is read as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trajectories.manifest import SCORE_MANIFEST, load_manifest
from trajectories.schema import SchemaError

FINISH = "rerun `helpgate prm score` with one --model on it to finish (a rerun rescores only what that PRM did not)"


def check_one_prm(data: Path, scored: Iterable[str] = ()) -> None:
    """Refuse a folder whose score manifest has a pending shard or two PRMs, or leaves out one of ``scored``
    (the names, relative to ``data``, of its shards that hold a ``prm_score`` column)."""
    path = data / SCORE_MANIFEST
    if not path.is_file():
        return
    shards = load_manifest(path).get("shards", {})
    pending = sorted(name for name, entry in shards.items() if entry.get("pending"))
    if pending:
        raise SchemaError(f"{data / pending[0]}: prm score stopped while scoring it ({path} marks "
                          f"{len(pending)} shard{'s' if len(pending) > 1 else ''} pending); {FINISH}.")
    first_of: dict[str, str] = {}
    for name, entry in sorted(shards.items()):
        if entry.get("prm"):
            first_of.setdefault(entry["prm"], name)
    if len(first_of) > 1:
        (one, a), (two, b) = list(first_of.items())[:2]
        raise SchemaError(f"{data / b}: scored by PRM {two[:19]}…, but {a} by PRM {one[:19]}… ({path}): a re-score "
                          f"cut off between shards leaves two PRMs' scores in one folder; {FINISH}.")
    unlisted = sorted(set(scored) - set(shards))
    if unlisted:
        raise SchemaError(f"{data / unlisted[0]}: holds prm_score, but {path} does not list it: scored by a run "
                          f"that manifest does not record (a re-score restarted part way); {FINISH}.")
