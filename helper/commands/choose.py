"""The pipeline's verifier target, pooling and binning, chosen on the training folds (never on test episodes).

    choice = choose(cfg, "runs/x/trajectories", "runs/x/choose", budgets=[1, 2, 3])

Where ``helpgate pipeline`` is left to choose (``--prm-target auto``; pooling and binning, auto by default for a
plug-in environment, are experiment options elsewhere), every candidate is tried on the training collection only:

1. for each pooling, the backbone runs once over the training episodes (a feature cache per pooling), and for
   each target a PRM head is fitted out of fold (``prm train``'s folds, by group): every training row gets a
   score from a head that did not see its episode;
2. for each binning, the family the helper would choose its member from (the solved table, its variants and the
   threshold on the same score: ``helper.solve.select.family_for``) is cross-fitted over those same folds as
   distill cross-fits it (``tabular_rl.choice.selection``): each member fitted on the other folds and read on the fold it
   did not see, the best member under each cap C; and so is the priced family at a spend of C an episode with no
   cap (``helper.solve.select.priced_family``), the best member within that spend;
3. the candidate with the highest mean of the two, averaged over the budgets solved for, is chosen (the first
   listed wins a tie).

A verifier is judged through the members the helper will play with it, under a cap and at a spend, not its solved
table alone: where a threshold on one verifier beats every table on another (the arithmetic chain with 192 training
chains: the feature-reading head's threshold), the table-only figure chose the verifier whose threshold the helper
then could not play; judged under the cap alone, the rapids' choice moved to a verifier whose priced helper trailed
`router` at a spend.

Target candidates: ``soft`` (the episode's Monte-Carlo outcome), ``process`` where the environment rewards
steps, ``fatal`` (the step a failed episode ended on: no step reward needed) where some episode failed, ``mc``
where every row carries the cloned branches (``--counterfactual``), ``proposal`` in proposal mode when logged.
Pooling: ``last`` and ``mean`` (a fine-tuned encoder has only its own). Binning: ``quantile`` and
``supervised``. State features (a plug-in environment whose observations carry them, ``--prm-state-features``
left unset): the head without and with them beside the hidden state, so a verifier never reads less than what a
feature-reading baseline (``router``) reads where the features rank the agent's mistakes and the text does not.
Words (a plug-in environment left to choose): a head on the state text's words alone (``prm.inputs.words``), with
the step targets, where a few dozen episodes leave the backbone's head blind to a risk the text names. The choice
and every candidate's training-fold figures go to ``<out>/choice.json`` (and the pipeline copies them into
``pipeline.json``). Nothing here builds an environment: the sweep's test episodes
are not read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from trajectories.files import write_json_atomic

AUTO = "auto"
CHOICE_FILE = "choice.json"
BINNING_CANDIDATES = ("quantile", "supervised")
WORD_TARGETS = ("process", "fatal")
"""The targets a head on the state's words is tried with (``prm.inputs.words``): the step's own outcome."""
POOLING_CANDIDATES = ("last", "mean")


def target_candidates(frame: pl.DataFrame, decide_after: str, threshold: float = 0.5) -> list[str]:
    """The PRM targets this training collection can teach (module docstring), in tie-breaking order."""
    from prm.data import labels as L

    wins, losses = L.class_counts(frame, threshold)
    out = ["soft"] if wins and losses else []
    if L.has_process_rewards(frame):
        out.append("process")
    if losses:
        out.append("fatal")
    if L.has_branches(frame):
        out.append("mc")
    if decide_after == "proposal" and L.has_proposal_rewards(frame):
        out.append("proposal")
    if not out:
        raise L.SingleClassError("the training collection has no failed episode, no step reward and no branches: "
                                 "no PRM target can be taught; collect episodes with more varied outcomes.")
    return out


def scored_rows(trajectories: str, prm_dir: Path) -> tuple[pl.DataFrame, np.ndarray]:
    """The training rows with the PRM's out-of-fold scores, and each row's fold (prm train's, by group)."""
    from prm.data.episodes import OOF_FILE
    from trajectories.shards import read_trajectories

    rows = read_trajectories(trajectories).sort(["episode_id", "step"])
    oof = pl.read_parquet(prm_dir / OOF_FILE).select("episode_id", "step", "fold", "prm_score")
    scored = rows.drop("prm_score", strict=False).join(oof, on=["episode_id", "step"], how="inner")
    if scored.height != rows.height:
        raise ValueError(f"{prm_dir}: out-of-fold scores cover {scored.height} of {rows.height} training rows; "
                         "train the PRM with --folds 2 or more.")
    scored = scored.sort(["episode_id", "step"])
    return scored, scored["fold"].to_numpy()


def binning_values(scored: pl.DataFrame, folds: np.ndarray, budgets: list[int], bins: int, binnings: list[str],
                   pessimism: float = 0.0) -> dict[str, dict[int, float]]:
    """Per binning, per budget C, the held-out success of the members the helper would play with this verifier,
    under both yardsticks: the family a solve with that binning gives distill (``helper.solve.select.family_for``:
    the solved table, its variants and the threshold on the same score) under the cap C, and the priced family at a
    spend of C an episode with no cap (``helper.solve.select.priced_family``), each cross-fitted over ``folds`` as
    distill and the sweep choose among them; the mean of the two best."""
    from helper.solve.select import family_for, priced_family, priced_tables
    from helper.solve.solve_command import own_rewards
    from tabular_rl.choice.selection import cross_fitted
    from tabular_rl.transitions import Columns

    cols = Columns()
    own = own_rewards(scored, cols)
    horizon = int(scored[cols.step].max()) + 1
    decisions = float(scored.group_by(cols.episode).len()["len"].mean())
    out = {}
    for binning in binnings:
        family = family_for({"bins": bins, "binning": binning, "pessimism": pessimism}, scored, budgets)
        supervised = own if any(s.binning == "supervised" for s in family) else None
        capped = cross_fitted(scored, folds, family, budgets, targets=supervised)
        best = capped.best()
        tables = priced_tables(family)
        values = {}
        for j, c in enumerate(capped.budgets):
            free = cross_fitted(scored, folds, priced_family(tables, decisions, c), [horizon], targets=supervised)
            spent = free.success[free.best_within(c, horizon), 0]
            values[c] = 0.5 * (float(capped.success[best[c], j]) + float(spent))
        out[binning] = values
    return out


def choose(cfg, trajectories: str, out: str | Path, budgets: list[int]) -> dict:
    """Try every candidate left to choose in ``cfg`` (a ``PipelineConfig``) on the training collection; write
    and return the choice (module docstring)."""
    from prm.inputs.signals import state_keys
    from prm.training import train as prm_train
    from prm.verifiers.backbones import is_encoder
    from trajectories.shards import read_trajectories

    out = Path(out)
    frame = read_trajectories(trajectories)
    targets = (target_candidates(frame, cfg.decide_mode()) if cfg.prm_target_name() == AUTO
               else [cfg.prm_target_name()])
    poolings = ([cfg.pooling_name()] if cfg.pooling_name() != AUTO
                else ["last"] if is_encoder(cfg.prm_model) else list(POOLING_CANDIDATES))
    binnings = [cfg.binning_name()] if cfg.binning_name() != AUTO else list(BINNING_CANDIDATES)
    features = [False, True] if cfg.chooses_state_features() and state_keys(frame) else [cfg.state_features()]
    # (pooling, target, reads the state features, reads the words alone): a words head has no hidden state to pool,
    # and its words tell the step's risk, not the episode's end, so it is tried once per step target.
    word_targets = [t for t in targets if t in WORD_TARGETS] or (targets if cfg.prm_word_features else [])
    words_offered = cfg.chooses_word_features() or bool(cfg.prm_word_features)
    heads = [] if cfg.prm_word_features else [
        (pooling, target, state, False) for pooling in poolings for target in targets for state in features]
    heads += [(poolings[0], target, False, True) for target in word_targets] if words_offered else []
    candidates = []
    for pooling, target, state, words in heads:
        cache = out / f"features-{pooling}.npz"
        # The backbone's features are cached per pooling: a second head (with the state features) costs a fit.
        folder = out / (f"prm-{pooling}-{target}" + ("-state" if state and len(features) > 1 else "")
                        + ("-words" if words else ""))
        extra = {"word_features": True, "hidden": False} if words else {}
        metrics = prm_train.run_train(cfg.prm_train_config(
            trajectories, folder, target=target, pooling=pooling, state_features=state,
            feature_cache=str(cache), progress=False, **extra))
        scored, folds = scored_rows(trajectories, folder)
        for binning, values in binning_values(scored, folds, budgets, cfg.bins, binnings,
                                              cfg.solve_pessimism).items():
            candidate = {"target": target, "pooling": pooling, "binning": binning, "state_features": state,
                         "held_out_success": {str(c): v for c, v in values.items()},
                         "mean_held_out_success": float(np.nanmean(list(values.values()))),
                         "prm_oof_auroc": metrics.get("oof_auroc"), "prm_label": metrics.get("target")}
            if words_offered:
                candidate["word_features"] = words
            candidates.append(candidate)
    best = max(candidates, key=lambda c: (np.nan_to_num(c["mean_held_out_success"], nan=-1.0),
                                          -candidates.index(c)))
    choice = {
        "target": best["target"], "pooling": best["pooling"], "binning": best["binning"],
        "state_features": best["state_features"], "word_features": best.get("word_features", False),
        "criterion": ("the helper's family under each cap C and its priced family at a spend of C (helper.solve."
                      "select.family_for, priced_family) cross-fitted over the PRM's training folds (by group): each "
                      "member fitted on the other folds and read on the fold it did not see (tabular_rl.choice.selection), "
                      f"the mean of the two best members' success, mean over budgets {budgets}; out-of-fold PRM "
                      "scores"),
        "rows": f"training collection only ({frame['episode_id'].n_unique()} episodes, {frame.height} rows)",
        "candidates": candidates,
    }
    write_json_atomic(choice, out / CHOICE_FILE)
    named = ("target", "pooling", "binning") + (("state_features",) if len(features) > 1 else ()) + (
        ("word_features",) if "word_features" in best else ())
    print("[pipeline] chosen on training folds: " + ", ".join(f"{k} {best[k]}" for k in named)
          + f" (held-out success {best['mean_held_out_success']:.4f}; "
          + "; ".join("/".join(str(c[k]) for k in named) + f" {c['mean_held_out_success']:.4f}"
                      for c in candidates) + ")", flush=True)
    return choice


def load_choice(out: str | Path) -> dict:
    """The choice a finished run made (``<out>/choice.json``)."""
    path = Path(out) / CHOICE_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no choice recorded; run the pipeline's prm stage again (--redo) to choose on the "
                         "training folds, or give --prm-target, --prm-pooling and --binning.")
    return json.loads(path.read_text())
