"""A pipeline run again on its folder resumes only where its finished stages still match the command.

``helpgate pipeline`` skips a stage whose ``<stage>/.done`` exists. Run again with other settings on
the same ``--out`` it would skip finished stages made with the old ones and write the new settings
to ``pipeline.json``: a folder whose solve was cut with ``--bins 6`` would say ``--bins 8``. So
before any work the new settings are compared with the folder's ``pipeline.json`` (the settings of
the last run that worked there, which every earlier run matched on its finished stages): a changed
setting makes its first stage and every later one stale, and a stale stage that is already finished
is refused in one line naming the setting, both values and what to do.

``--redo`` skips that comparison, so ``forget_finished`` deletes every stage's ``.done`` before the new
settings are written to ``pipeline.json``: a redo killed after its first stage used to leave the old
markers beside the new settings, and the next run skipped every stage (``pipeline.json`` said 3 bins while
the solve had used 6). Killed at any moment, the folder holds markers only of stages finished with the
settings ``pipeline.json`` names.
"""

from __future__ import annotations

import json
from pathlib import Path

from helper.stored_config import config_of, flat, same_setting

STAGES = ("collect", "prm", "score", "solve", "distill", "sweep")

FIRST_STAGE = {
    **dict.fromkeys(("prm_model", "prm_lora", "prm_target", "prm_layers", "prm_state_features", "prm_hidden",
                     "prm_proposal_features", "prm_pooling", "prm_folds", "prm_fold_mean", "prm_word_features"), "prm"),
    **dict.fromkeys(("bins", "binning", "solve_pessimism"), "solve"),
    "backend": "distill",
    **dict.fromkeys(("eval_episodes", "methods", "rl_use_prm"), "sweep"),
}
"""The first stage a setting changes; a setting not named here (the environment, its actors, the
episodes, budgets, seed, --quick, ...) changes collection and so every stage."""

IGNORED = frozenset({"out", "redo", "device"})
"""Settings that do not change what a stage makes (where it runs, where it writes, whether it redoes)."""


def stale_stage(out: Path, config) -> str | None:
    """The refusal for running ``config`` on ``out``: None where every finished stage still matches."""
    stored_path = out / "pipeline.json"
    if not stored_path.is_file():
        return None
    try:
        stored = flat(config_of(type(config), json.loads(stored_path.read_text()), where=stored_path))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return f"{stored_path}: not readable JSON ({error}); give a new --out or delete the folder."
    now = flat(config)
    changed = [key for key in now if key not in IGNORED and not same_setting(key, stored.get(key), now[key])]
    finished = [stage for stage in STAGES if (out / stage / ".done").exists()]
    for key in changed:
        first = STAGES.index(FIRST_STAGE.get(key, "collect"))
        stale = [stage for stage in finished if STAGES.index(stage) >= first]
        if stale:
            flag = "--" + key.replace("_", "-")
            return (f"{out}: stage {stale[0]} finished with {flag} {stored.get(key)!r}, this command says "
                    f"{now[key]!r}, so its files would not match the command; give a new --out, --redo (every "
                    f"stage again), or delete the .done file of {stale[0]} and of every later stage to redo from there.")
    return None


def forget_finished(out: Path) -> None:
    """Delete the ``.done`` of every stage in ``out`` (a cross-fitted run's folds included); the settings go to
    ``pipeline.json`` only after this, so no marker outlives the settings it was made with."""
    for marker in sorted(out.glob("*/.done")):
        marker.unlink(missing_ok=True)
