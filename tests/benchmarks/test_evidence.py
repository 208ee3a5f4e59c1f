"""benchmarks/setups/evidence.py's tables on hand-made run folders: the numbers are the hand-computed ones."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest
from imports import benchmark_module


def _run(folder: Path, helper: list[int], other: list[int], auroc: float) -> Path:
    """A finished run: helper and `random` at C=1 on the same episodes, with per-episode wins."""
    (folder / "sweep").mkdir(parents=True)
    (folder / "prm").mkdir()
    rows = [("never", 0, 0.0, 0.0), ("always", 1, 1.0, 1.0),
            ("helper", 1, float(np.mean(helper)), 1.0), ("random", 1, float(np.mean(other)), 1.0)]
    pd.DataFrame(rows, columns=["method", "budget", "success", "interventions"]).to_csv(folder / "sweep" / "sweep.csv")
    episodes = [("helper", 1, f"e{i}", w) for i, w in enumerate(helper)] + \
               [("random", 1, f"e{i}", w) for i, w in enumerate(other)]
    pd.DataFrame(episodes, columns=["method", "budget", "episode_id", "success"]).to_csv(folder / "sweep" / "episodes.csv")
    methods = {m: {"apgr": 0.5, "apgr_extrapolated_share": 0.0, "cpt50": 0.5, "cpt80": 0.8, "training_calls": {}}
               for m in ("never", "always", "helper", "random")}
    (folder / "sweep" / "summary.json").write_text(json.dumps({"methods": methods}))
    (folder / "prm" / "metrics.json").write_text(json.dumps({
        "oof_auroc": auroc, "target": "label_proposal", "in_fold_auroc": 0.9,
        "oof_auroc_per_type": {"fact_qa": auroc}, "oof_rows_per_type": {"fact_qa": {"rows": 4, "positives": 2}}}))
    return folder


def test_paired_difference_pools_seeds_episode_by_episode():
    evidence = benchmark_module("evidence")
    helper = [np.array([1, 1, 0, 1]), np.array([1, 0])]
    other = [np.array([0, 1, 0, 0]), np.array([1, 0])]
    mean, low, high = evidence.pooled_difference(helper, other, resamples=500)
    assert mean == pytest.approx(2 / 6)  # two wins more over six paired episodes
    # Resampling within seeds: at best all four of seed 0 differ (4/6), never a difference in seed 1.
    assert 0.0 <= low <= mean <= high <= 4 / 6
    same = evidence.pooled_difference(helper, helper, resamples=50)
    assert same == (0.0, 0.0, 0.0)


def test_tables_and_mode_comparison(tmp_path):
    evidence = benchmark_module("evidence")
    seeds = [_run(tmp_path / "p" / "seed0", [1, 1, 0, 1], [0, 1, 0, 0], 0.70),
             _run(tmp_path / "p" / "seed1", [1, 0, 1, 1], [1, 0, 1, 1], 0.60)]
    text = evidence.tables(seeds)
    # helper 0.75 in both seeds; random 0.25 and 0.75; helper minus random over 8 paired episodes: 2/8
    assert "| helper | 0.750 (1.00) |" in text
    assert "| random | 0.500 (1.00) Δ +0.250 [" in text
    assert "| seed0 | label_proposal | 0.700 | 0.700 (2/4) | 0.900 |" in text
    assert "| mean | | 0.650 |" in text

    state = [_run(tmp_path / "s" / "seed0", [0, 1, 0, 1], [0, 1, 0, 0], 0.55),
             _run(tmp_path / "s" / "seed1", [1, 0, 1, 1], [1, 0, 1, 1], 0.65)]
    table = evidence.modes_table(seeds, state)
    assert "| decide after the proposal | 0.750 | 0.500 | 0.650 |" in table
    assert "| decide after the state | 0.625 | 0.500 | 0.600 |" in table
    assert "| proposal minus state (paired) | +0.125 [" in table


def test_gold_table_pairs_each_method_with_itself(tmp_path):
    evidence = benchmark_module("evidence")
    plain = [_run(tmp_path / "plain" / "seed0", [1, 0, 0, 1], [0, 0, 0, 0], 0.7)]
    gold = [_run(tmp_path / "gold" / "seed0", [1, 1, 0, 1], [1, 1, 1, 0], 0.7)]
    table = evidence.gold_table(plain, gold, ("helper", "random"))
    # gold minus plain, same episodes: helper gains one episode of four, random three of four.
    assert "| helper | 0.500 | 0.500 | +0.250 [" in table
    assert "| random | 0.500 | 0.500 | +0.750 [" in table
    # Within each arm, the helper against the other method: +2/4 plain, 0 gold.
    assert "| random (plain) | +0.500 [" in table and "| random (gold) | +0.000 [" in table


def test_episodes_switch_sizes_the_runs_and_names_their_folder(tmp_path, monkeypatch):
    import helper.commands.pipeline

    evidence = benchmark_module("evidence")
    seen = []
    monkeypatch.setattr(helper.commands.pipeline, "run", lambda cfg: seen.append(cfg))
    folder = evidence.setup_folder(tmp_path, "productqa", "proposal", 192)
    assert folder.name == "productqa-proposal-e192" and evidence.setup_folder(tmp_path, "productqa", None).name == "productqa"
    evidence.run_seed(folder / "seed0", "productqa", 0, "proposal", episodes=192)
    evidence.run_seed(tmp_path / "plain", "productqa", 1, None, episodes=None)
    assert (seen[0].episodes, seen[0].eval_episodes, seen[0].decide_after) == (192, 32, "proposal")
    assert (seen[1].episodes, seen[1].seed) == (64, 1)  # the set-up's own size when not named


def test_online_rl_table_reads_the_curve_summary():
    evidence = benchmark_module("evidence")
    summaries = [{"methods": {"online_rl": {"training_calls": {"strong": 0, "human": 13283}}},
                  "online_rl": {"stopped": "flattened", "timesteps": 16388,
                                "helper_validation_success": {"2": 0.8, "1": 0.7},
                                "calls_to_reach_helper": {"1": 2636, "2": None}}},
                 {"methods": {}}]
    text = evidence.online_rl_table(summaries)
    assert "| 0 | flattened | 16388 | 13283 | C=1:0.700 C=2:0.800 | C=1:2636 C=2:not reached |" in text
    assert "| 1 |  |  | 0 |  |  |" in text  # a seed without online_rl: an empty row, not a crash


def test_prm_variants_table_reads_finished_variants_and_averages_them(tmp_path):
    variants = benchmark_module("prm_variants")
    assert variants.parse_variant("layers=16,history=0") == {"layers": 16, "history": 0}
    assert variants.parse_variant("layers=0") == {"layers": None}  # every layer
    assert variants.parse_variant("mode=state,layers=4") == {
        "tag_after": "state", "target": "process", "base_only": True, "layers": 4}
    with pytest.raises(SystemExit, match="integer values"):
        variants.parse_variant("lora=yes")
    assert variants.parse_variant("lora=1,layers=4,history=0,lr=3e-4") == {"lora": True, "layers": 4, "history": 0,
                                                                          "lr": 3e-4}
    assert variants.parse_variant("model=encoder") == {"model": "encoder", "layers": None}
    runs = []
    for seed, (auroc, fact) in enumerate(((0.70, 0.8), (0.80, 0.6))):
        run = tmp_path / "evidence" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "pipeline.json").write_text(json.dumps({"seed": seed}))
        done = tmp_path / "out" / f"evidence-seed{seed}" / "layers16"
        done.mkdir(parents=True)
        (done / "metrics.json").write_text(json.dumps({
            "oof_auroc": auroc, "oof_auroc_per_type": {"fact_qa": fact}, "seconds": 10 * (seed + 1),
            "validation": {"per_step": {"0": {"auroc": auroc}, "1": {"auroc": 0.5}}}}))
        runs.append(str(run))
    text = variants.main(runs + ["--variants", "layers=16", "--out", str(tmp_path / "out")])
    row = text.splitlines()[-1]
    assert row.startswith("| layers=16 | 0.700 | 0.800 | **0.750** | fact 0.700 | 0.75 / 0.50 | 15 | — |")

    # The rank mean of two variants' out-of-fold scores, on the judged rows both scored.
    outcome = [1.0, 0.0, 1.0, 0.0]
    for seed in range(2):
        for name, scores in (("layers16", [0.9, 0.1, 0.8, 0.2]), ("layers4", [0.1, 0.2, 0.3, 0.4])):
            folder = tmp_path / "out" / f"evidence-seed{seed}" / name
            folder.mkdir(exist_ok=True)
            pl.DataFrame({"episode_id": ["a", "a", "b", "c"], "step": [0, 1, 0, 0], "outcome": outcome,
                          "used": [True] * 4, "prm_score": scores}).write_parquet(folder / "validation_scores.parquet")
    assert variants.rank_mean_auroc(Path(runs[0]), ["layers16"], tmp_path / "out") == pytest.approx(1.0)
    assert variants.rank_mean_auroc(Path(runs[0]), ["layers4"], tmp_path / "out") == pytest.approx(0.25)
    # rank sums 4+1, 1+2, 3+3, 2+4 = 5, 3, 6, 6: positives 5 and 6 against 3 and 6 (one tie) = 2.5 / 4.
    assert variants.rank_mean_auroc(Path(runs[0]), ["layers16", "layers4"], tmp_path / "out") == pytest.approx(0.625)


def test_prm_variants_partial_reads_the_folds_a_stopped_verifier_finished(tmp_path):
    variants = benchmark_module("prm_variants")
    run = tmp_path / "evidence" / "seed0"
    run.mkdir(parents=True)
    (run / "pipeline.json").write_text(json.dumps({"seed": 0}))
    keys = {"episode_id": ["a", "a", "b", "c"], "step": [0, 1, 0, 0]}
    outcome = [1.0, 0.0, 1.0, 0.0]
    frozen = tmp_path / "out" / "evidence-seed0" / "layers8"
    frozen.mkdir(parents=True)
    pl.DataFrame({**keys, "outcome": outcome, "used": [True] * 4,
                  "prm_score": [0.2, 0.8, 0.9, 0.1]}).write_parquet(frozen / "validation_scores.parquet")
    folds = tmp_path / "out" / "evidence-seed0" / "modelencoder" / "fold_scores"
    folds.mkdir(parents=True)
    # One fold of two finished: rows a/0, a/1, c/0 (b's fold never ran).
    pl.DataFrame({"episode_id": ["a", "a", "c"], "step": [0, 1, 0], "outcome": [1.0, 0.0, 0.0], "used": [True] * 3,
                  "prm_score_raw": [0.9, 0.1, 0.2], "fold": [0] * 3, "seconds": [12.0] * 3}
                 ).write_parquet(folds / "fold0.parquet")
    text = variants.main([str(run), "--variants", "layers=8", "model=encoder", "--out", str(tmp_path / "out"),
                          "--partial"])
    # The verifier ranks the three rows perfectly; the frozen PRM, on the same three rows only (b is not
    # among them), puts the one positive (0.2) between its two negatives (0.8, 0.1): 0.500.
    assert text.splitlines()[-1] == "| model=encoder | 1 (0) | 3 | 1.000 | 0.500 | 12 |"


def test_paired_difference_resamples_seeds_then_groups_where_episodes_carry_one(monkeypatch):
    evidence = benchmark_module("evidence")

    def seed(helper, other, groups):
        return pd.DataFrame([(m, 1, f"e{i}", g, s) for m, values in (("helper", helper), ("random", other))
                             for i, (g, s) in enumerate(zip(groups, values))],
                            columns=["method", "budget", "episode_id", "group", "success"])

    # One seed; the helper wins all of group a, ties all of group b: over groups the interval is [0, 1]
    # (two fair coins, as in test_metrics_hierarchical); resampling episodes alone it is narrower.
    grouped = [seed([1] * 8, [0] * 4 + [1] * 4, ["a"] * 4 + ["b"] * 4)]
    assert evidence.paired_difference(grouped, "helper", grouped, "random", 1) == (0.5, 0.0, 1.0)
    flat = [grouped[0].drop(columns="group")]
    mean, low, high = evidence.paired_difference(flat, "helper", flat, "random", 1)
    assert mean == 0.5 and 0.0 < low < 0.5 < high < 1.0
    # --episode-intervals: the same grouped episodes, resampled as before groups existed
    monkeypatch.setattr(evidence, "EPISODE_INTERVALS", True)
    assert evidence.paired_difference(grouped, "helper", grouped, "random", 1) == (mean, low, high)


def test_prm_variants_intervals_pair_each_variant_with_the_first_on_the_same_rows(tmp_path, monkeypatch):
    variants = benchmark_module("prm_variants")
    monkeypatch.setattr(sys.modules["benchmarks.verifier.grouped_auroc"], "RESAMPLES", 200)
    rng = np.random.default_rng(0)
    runs = []
    for seed in range(2):
        run = tmp_path / "evidence" / f"seed{seed}"
        runs.append(run)
        outcome = rng.integers(0, 2, 30).astype(float)
        outcome[:2] = [0.0, 1.0]
        keys = {"episode_id": [f"s{seed}e{i // 3}" for i in range(30)], "step": [i % 3 for i in range(30)],
                "task_id": [f"g{i % 5}/q{i}" for i in range(30)], "outcome": outcome, "used": [True] * 30}
        for name, score in (("layers8", rng.random(30)), ("history0", outcome)):
            folder = tmp_path / "out" / f"evidence-seed{seed}" / name
            folder.mkdir(parents=True)
            pl.DataFrame({**keys, "prm_score": score}).write_parquet(folder / "validation_scores.parquet")
    lines = variants.interval_table(runs, ["layers=8", "history=0"], tmp_path / "out").splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| evidence-seed0 (30)", "| evidence-seed1 (30)",
                                                            "| pooled (60)"]
    # The second variant is the outcome itself: 1 with no spread, and above the first in every resample.
    for line in lines[2:]:
        cells = line.strip("| ").split(" | ")
        assert cells[2] == "1.000 [1.000, 1.000]" and cells[3].startswith("+") and float(cells[3].split("[")[1].split(",")[0]) > 0
