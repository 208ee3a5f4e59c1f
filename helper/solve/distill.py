"""``helpgate distill``: train the helper classifier on the optimal labels of ``helpgate solve``.

    helpgate distill --labels runs/demo/solve --prm runs/demo/prm --out runs/demo/helper
    helpgate distill --labels runs/demo/solve --prm none --backend text --text-model smollm2 ...

Labels. The exact (hard-budget) solution for the largest budget C holds the optimal action for
every (step, state, budget left) with budget left 0..C. Every logged row is therefore labelled
once per budget left b = 1..C (``tabular_rl.label`` on the row with ``budget_left = b``): the
classifier learns how the decision changes with the budget, not only at the budgets that
happened to be logged. Rows with no budget left are not needed (the gate never asks then).

Backends: ``features`` (gradient boosting or logistic regression on the PRM score, step,
progress, budget left and the ``features`` column; see ``helper.gates.features``) and ``text`` (a
sequence classifier on the state text with the budget written in; ``helper.gates.text_classifier``).
Both are class-weighted. A *fallback* features classifier without the PRM score is always
trained too: the gate uses it when no score can be computed.

Held-out agreement: episodes (not rows) are split into train / test with a seeded hash of the
episode id; agreement, balanced accuracy and predicted vs. optimal intervention rate on the test
episodes are reported per budget left, printed, and stored in ``helper.json``.

Writes ``out``: ``helper.json`` (config, report, training cost, ``trained_on``: env, horizon, budget,
method and advice cost, which the gate compares with its use), ``classifier/``, ``fallback/``,
``policy.npz`` + ``discretizer.json`` (the solved table, for ``--backend table`` at load time).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from helper.solve import solve_files
from helper.gates.features import SCORE_FEATURE, FeatureClassifier, default_feature_names, frame_features
from helper.solve.distill_inputs import held_out_mask, prm_decide_after  # noqa: F401 (re-exported)
from helper.gates.helper_gate import HelperGate, recorded_path
from helper.gates.trained_on import trained_on
from trajectories.outputs import not_another_run, out_folder
from trajectories.shards import read_shard

LABEL = "optimal_intervene"
NO_PRM = ("", "none", "None")


@dataclass
class DistillConfig:
    labels: str = "runs/default/solve"
    """Folder written by `helpgate solve` (labels.parquet, discretizer.json, policy_c{C}.npz)."""
    prm: str = "runs/default/prm"
    """PRM folder the gate scores with at decision time; 'none' for a helper without a PRM."""
    out: str = "runs/default/helper"
    """Helper folder to write (HelperGate.load reads it)."""
    backend: Literal["features", "text"] = "features"
    """features: classifier on PRM score, step, progress, budget and numeric features; text: on the state text."""
    model: Literal["gbm", "logreg"] = "gbm"
    """Features backend (and fallback) model: gradient boosting or logistic regression."""
    solved_budget: int | None = None
    """Which solved table gives the labels: the budget C it was solved for (default: the largest one in --labels)."""
    test_fraction: float = 0.2
    """Share of episodes held out to report agreement with the optimal labels."""
    seed: int = 0
    """Seed of the episode split and the classifiers."""
    text_model: str = "smollm2"
    """Text backend: model name (smollm2, tiny, a Hugging Face id or a local folder)."""
    text_epochs: int = 2
    """Text backend: passes over the training rows."""
    text_batch_size: int = 16
    """Text backend: rows per optimiser step."""
    text_lr: float = 5e-5
    """Text backend: AdamW learning rate."""
    text_max_length: int = 512
    """Text backend: tokens kept per input (cut from the left: the budget line stays)."""
    max_rows: int | None = None
    """Use at most this many (row, budget) training examples (random subset), for quick runs."""
    copy_prm: bool = False
    """Copy the PRM folder into the helper folder (self-contained) instead of referencing it."""
    device: str | None = None
    """Torch device of the text backend (default: cuda when available, else cpu)."""
    allow_incomplete: bool = False
    """Distill a solve folder made from an unfinished collection (solve --allow-incomplete) instead of refusing
    it; recorded in helper.json."""
    members: bool = True
    """Per solved cap, play the member that does best on the training folds among the solved table's variants and
    the threshold on the same score (helper.solve.select: members/); False plays the classifier at every cap."""


def _solved_budget(directory: Path, wanted: int | None) -> int:
    # Only the budgets the latest solve wrote (solve.json): a policy left from an earlier solve
    # would be paired with a discretizer it was not solved on.
    found = sorted(int(b) for b in solve_files.verify(directory)["budgets"])
    if wanted is None:
        return found[-1]
    if wanted not in found:
        raise ValueError(f"solved_budget={wanted}: {directory} has solutions for budgets {found} only.")
    return wanted


def load_solution(directory: str | Path, solved_budget: int | None = None):
    """(discretizer, exact Solution) from a solve folder: the table solved for ``solved_budget`` (default: the
    largest the folder's solve.json lists)."""
    from tabular_rl import Discretizer, Solution

    directory = Path(directory)
    budget = _solved_budget(directory, solved_budget)
    discretizer = Discretizer.load(directory / "discretizer.json")
    solution = Solution.load(directory / f"policy_c{budget}.npz", discretizer)
    if not solution.hard_budget:
        raise ValueError(
            f"{directory / f'policy_c{budget}.npz'}: method {solution.method!r} keeps the budget only in "
            "expectation, so its table has no budget-left axis to distill. Re-run `helpgate solve "
            "--method exact`."
        )
    return discretizer, solution


def expand_labels(frame: pl.DataFrame, solution) -> pl.DataFrame:
    """One row per (logged row, budget left b = 1..C) with the optimal label ``optimal_intervene``."""
    from tabular_rl import label

    parts = [frame.with_columns(pl.lit(b, dtype=pl.Int64).alias("budget_left")) for b in range(1, solution.budget + 1)]
    if not parts:
        raise ValueError("the solved budget is 0: there is no decision to learn. Solve for a budget >= 1.")
    return label(pl.concat(parts), solution, column=LABEL)


def agreement(y_true: np.ndarray, y_pred: np.ndarray, budget_left: np.ndarray) -> dict:
    """Agreement with the optimal labels, overall and per budget left."""
    def one(t, p):
        t, p = np.asarray(t, bool), np.asarray(p, bool)
        recalls = [float((p[t == c] == c).mean()) for c in (False, True) if (t == c).any()]
        return {"rows": int(t.size), "agreement": float((t == p).mean()) if t.size else None,
                "balanced_accuracy": float(np.mean(recalls)) if recalls else None,
                "optimal_rate": float(t.mean()) if t.size else None,
                "predicted_rate": float(p.mean()) if p.size else None}

    report = one(y_true, y_pred)
    report["by_budget_left"] = {int(b): one(y_true[budget_left == b], y_pred[budget_left == b])
                                for b in np.unique(budget_left)}
    return report


def training_calls(frame: pl.DataFrame) -> dict:
    """Strong-model and human calls spent collecting the logged data."""
    interventions = frame.filter(pl.col("intervened"))
    return {"strong": int((interventions["actor"] == "strong").sum()),
            "human": int((interventions["actor"] == "human").sum()),
            "episodes": int(frame["episode_id"].n_unique()), "rows": int(frame.height)}


def _advice_cost(source: Path) -> float | None:
    """The advice cost of a priced solve (``helpgate solve --advice-cost``), else None."""
    import json

    summary = source / "solution.json"
    if not summary.is_file():
        return None
    return json.loads(summary.read_text()).get("config", {}).get("advice_cost")


def _fit_features(cfg: DistillConfig, train: pl.DataFrame, names: list[str]) -> FeatureClassifier:
    return FeatureClassifier(cfg.model, names, random_state=cfg.seed).fit(frame_features(train, names),
                                                                          train[LABEL].to_numpy())


def _text_inputs(frame: pl.DataFrame) -> list[str]:
    from helper.gates.text_classifier import format_input

    horizon = (frame["horizon"] if "horizon" in frame.columns
               else frame.select(pl.col("step").max().over("episode_id") + 1).to_series())
    return [format_input(s, t, h, b) for s, t, h, b in
            zip(frame["state_text"], frame["step"], horizon, frame["budget_left"])]


def _check_numbers(cfg: DistillConfig) -> None:
    """Refuse counts and rates that cannot work, naming the option."""
    if cfg.max_rows is not None and cfg.max_rows < 1:
        raise ValueError(f"max_rows={cfg.max_rows}: give at least 1 training example, or leave it unset for all")
    if cfg.solved_budget is not None and cfg.solved_budget < 1:
        raise ValueError(f"solved_budget={cfg.solved_budget}: give a solved budget >= 1, or leave it unset for the "
                         "largest")
    for name in ("text_epochs", "text_batch_size", "text_max_length"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name}={getattr(cfg, name)}: must be >= 1")
    if not (0 < cfg.text_lr < float("inf")):
        raise ValueError(f"text_lr={cfg.text_lr}: give a finite learning rate > 0")


def run(cfg: DistillConfig) -> dict:
    """Label, split, fit, report, save; returns the report written into ``helper.json``."""
    out_folder(cfg.out, "runs/demo/helper")  # '' would write the helper into the current folder
    not_another_run(cfg.out, "helper")  # nor into its solve folder, its PRM or a collection
    source = Path(cfg.labels)
    labels_path = source / "labels.parquet"
    if not labels_path.exists():
        raise FileNotFoundError(f"{labels_path}: not found. Run `helpgate solve --out {source}` first.")
    prm_path = None if cfg.prm in NO_PRM else Path(cfg.prm)
    if prm_path is not None and not (prm_path / "prm_config.json").exists():
        raise FileNotFoundError(f"prm={cfg.prm!r}: no PRM there (prm_config.json missing). Pass the folder of "
                                "`helpgate prm train`, or --prm none for a helper that runs on its fallback.")
    if not 0 <= cfg.test_fraction < 1:
        raise ValueError(f"test_fraction={cfg.test_fraction}: must lie in [0, 1)")
    _check_numbers(cfg)
    record = solve_files.verify(source)
    unfinished = record.get("incomplete_input")
    if unfinished and not cfg.allow_incomplete:
        raise ValueError(f"{source / solve_files.SOLVE_MANIFEST}: solved from an unfinished collection "
                         f"({unfinished.get('data')}: manifest {unfinished.get('manifest')}, read with "
                         "--allow-incomplete); finish the collection and solve again, or pass --allow-incomplete "
                         "here too (recorded in helper.json).")
    if record.get("tiered"):  # which help to call: a classifier over the kinds (helper.solve.tiered_distill)
        from helper.solve.tiered_distill import distill_tiered

        return distill_tiered(cfg, source, record, prm_path)
    discretizer, solution = load_solution(source, cfg.solved_budget)
    logged = read_shard(labels_path, require=("episode_id", "step", "budget_left"))
    data = expand_labels(logged.drop([c for c in logged.columns if c.startswith(LABEL)]), solution)
    if cfg.max_rows and data.height > cfg.max_rows:
        data = data.sample(cfg.max_rows, seed=cfg.seed)
    held_out = held_out_mask(data["episode_id"], cfg.test_fraction, cfg.seed)
    train, test = data.filter(~held_out), data.filter(held_out)
    if train[LABEL].n_unique() < 2:
        print(f"distill: every training label is {bool(train[LABEL][0])}; the classifier will predict that constant.")

    names = default_feature_names(data, use_score=True)
    fallback = _fit_features(cfg, train, [n for n in names if n != SCORE_FEATURE])
    if cfg.backend == "features":
        classifier = _fit_features(cfg, train, names)
        predict = lambda frame: classifier.predict(frame_features(frame, names))
    else:
        from helper.gates.text_classifier import TextClassifier

        classifier = TextClassifier(cfg.text_model, cfg.text_max_length, cfg.text_epochs, cfg.text_batch_size,
                                    cfg.text_lr, cfg.seed, cfg.device).fit(_text_inputs(train), train[LABEL].to_numpy())
        predict = lambda frame: classifier.predict(_text_inputs(frame))

    report = {"train_episodes": int(train["episode_id"].n_unique()), "test_episodes": int(test["episode_id"].n_unique())}
    for split, frame in (("train", train), ("test", test)):
        if frame.height:
            y = frame[LABEL].to_numpy()
            report[split] = agreement(y, predict(frame), frame["budget_left"].to_numpy())
            report[split]["fallback_agreement"] = float((fallback.predict(
                frame_features(frame, fallback.feature_names)) == y).mean())

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if prm_path is not None and cfg.copy_prm:
        shutil.copytree(prm_path, out / "prm", dirs_exist_ok=True)
        prm_path = out / "prm"
    gate = HelperGate(cfg.backend, classifier, fallback, table=solution, discretizer=discretizer,
                      solved_budget=solution.budget, decide_after=prm_decide_after(prm_path))
    summary = {"report": report, "training_calls": training_calls(logged), **recorded_path(out, source, "labels_from"),
               "trained_on": trained_on(logged, solution, _advice_cost(source)),
               "solution": solution.summary(), "distill_config": asdict(cfg)}
    summary |= {"incomplete_input": unfinished} if unfinished else {}
    shutil.rmtree(out / "members", ignore_errors=True)  # an earlier distill's choice is not this one's
    if cfg.members and cfg.backend == "features":
        from helper.solve.select import select_members

        chosen = select_members(source, out)
        summary["members"] = None if chosen is None else {c: e["member"]["name"] for c, e in chosen["chosen"].items()}
    gate.save(out, prm=None if prm_path is None else str(prm_path), extra=summary)
    _print(report, out)
    return summary


def _print(report: dict, out: Path) -> None:
    test = report.get("test") or report.get("train")
    which = "held-out" if "test" in report else "training"
    print(f"distill: {which} agreement with optimal labels {test['agreement']:.3f} "
          f"(balanced {test['balanced_accuracy'] if test['balanced_accuracy'] is None else round(test['balanced_accuracy'], 3)}), "
          f"intervene rate predicted {test['predicted_rate']:.3f} vs optimal {test['optimal_rate']:.3f}; "
          f"fallback agreement {test['fallback_agreement']:.3f}")
    for b, entry in test["by_budget_left"].items():
        print(f"  budget left {b}: agreement {entry['agreement']:.3f} over {entry['rows']} rows")
    print(f"distill: helper written to {out} (HelperGate.load({str(out)!r}))")
