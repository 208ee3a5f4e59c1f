"""``helpgate distill`` on a tiered solve: the helper folder that chooses which help to call.

    helpgate distill --labels runs/tiered/solve --prm runs/tiered/prm --out runs/tiered/helper [--solved-budget 6]

``helper.solve.distill.run`` comes here when the solve folder's ``solve.json`` names kinds (``tiered``). The labels
are the solved table's action at every resource state (budget left, calls left per capped kind) of every logged row
(``kind_classifier.expand_kinds``), held-out episodes report the agreement per kind, and the folder holds the
``KindClassifier``, the table and ``helper.json`` (``TieredHelperGate.save``).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from helper.solve.distill_inputs import held_out_mask, prm_decide_after
from helper.gates.features import default_feature_names
from helper.gates.helper_gate import recorded_path
from helper.gates.kind_classifier import CALLS, LABEL, KindClassifier, expand_kinds, kind_frame_features
from helper.gates.tiered_helper_gate import TieredHelperGate
from helper.gates.trained_on import trained_on
from tabular_rl import Discretizer
from tabular_rl.tiered import TieredSolution
from trajectories.shards import read_shard


def distill_tiered(cfg, source: Path, record: dict, prm_path: Path | None) -> dict:
    """``helpgate distill`` on a tiered solve (its ``solve.json`` names kinds), for ``--solved-budget`` (default: the
    largest solved): a ``KindClassifier`` on the table's action at every resource state of every logged row
    (``--backend features``), saved with the table (``HelperGate.load(dir, backend="tiered_table")`` plays it)."""
    if cfg.backend != "features":
        raise ValueError(f"backend={cfg.backend!r}: a tiered helper is distilled with --backend features (a classifier "
                         "over the kinds); the text backend does not choose kinds yet.")
    budgets = sorted(int(b) for b in record["budgets"])
    budget = budgets[-1] if cfg.solved_budget is None else int(cfg.solved_budget)
    if budget not in budgets:
        raise ValueError(f"solved_budget={budget}: {source} has tiered solutions for budgets {budgets} only.")
    solution = TieredSolution.load(source / f"tiered_policy_c{budget}.npz")
    discretizer = Discretizer.load(source / "discretizer.json")
    logged = read_shard(source / "labels.parquet", require=("episode_id", "step", "prm_score"))
    data = expand_kinds(logged.select([c for c in logged.columns if not c.startswith("optimal_kind")]), solution,
                        discretizer)
    if cfg.max_rows and data.height > cfg.max_rows:
        data = data.sample(cfg.max_rows, seed=cfg.seed)
    held_out = held_out_mask(data["episode_id"], cfg.test_fraction, cfg.seed)
    train, test = data.filter(~held_out), data.filter(held_out)
    names = default_feature_names(data) + [CALLS + solution.kinds[k - 1] for k in solution.resources.capped]
    # 50 rounds, not the one-kind 150: a multiclass booster grows a tree per class per round, and each tree is
    # saved and read back (skops) on every load; 50 already learn the table's kinds exactly on the tests' data.
    classifier = KindClassifier(cfg.model, names, cfg.seed, max_iter=50).fit(kind_frame_features(train, names),
                                                                             train[LABEL])
    report = {"train_episodes": int(train["episode_id"].n_unique()), "test_episodes": int(test["episode_id"].n_unique())}
    for split, frame in (("train", train), ("test", test)):
        if frame.height:
            y = frame[LABEL].to_numpy()
            said = classifier.predict_classes(kind_frame_features(frame, names), len(solution.kinds) + 1)
            report[split] = {"rows": int(y.size), "agreement": float((said == y).mean()),
                             "by_kind": {name: {"optimal": int((y == a).sum()), "predicted": int((said == a).sum()),
                                                "recall": float((said[y == a] == a).mean()) if (y == a).any() else None}
                                         for a, name in enumerate(("agent", *solution.kinds))}}
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if prm_path is not None and cfg.copy_prm:
        shutil.copytree(prm_path, out / "prm", dirs_exist_ok=True)
        prm_path = out / "prm"
    trained = trained_on(logged, SimpleNamespace(budget=budget, method=solution.method), None)
    summary = {"report": report, **recorded_path(out, source, "labels_from"), "trained_on": trained,
               "solution": solution.summary(), "distill_config": asdict(cfg)}
    gate = TieredHelperGate(solution, discretizer, decide_after=prm_decide_after(prm_path), trained_on=trained,
                            classifier=classifier, actors=(record.get("tiered") or {}).get("actors"))
    gate.save(out, prm=None if prm_path is None else str(prm_path), extra=summary)
    shown = report.get("test") or report["train"]
    print(f"distill: tiered helper for budget {budget} ({', '.join(f'{k} at {p:g}' for k, p in gate.prices.items())}"
          f"{f', caps {gate.caps}' if gate.caps else ''}): {'held-out' if 'test' in report else 'training'} "
          f"agreement with the table's kinds {shown['agreement']:.3f} over {shown['rows']} (row, budget left) pairs; "
          f"written to {out}")
    return summary
