"""`helpgate pipeline --cross-fit K` end to end on the simulator agent and a tiny PRM: one collection, each fold
trained on the other folds' groups only and swept on its own, the folds pooled for `helpgate report`."""

from __future__ import annotations

import json

import pandas as pd
import polars as pl
import pytest

from helper.commands.cli import main
from helper.commands.cross_fit import deal, pool_finished
from helper.commands.pipeline import PipelineConfig
from prm.data.folds import task_group
from trajectories.shards import read_shard, read_trajectories


def _groups(frame: pl.DataFrame) -> set[str]:
    return {task_group(t) for t in frame["task_id"].to_list()}


def test_folds_are_dealt_whole_and_apart():
    names = [f"g{i:02d}" for i in range(24)]
    folds = deal(names, 5, seed=3)
    assert sorted(g for fold in folds for g in fold) == names and sorted(map(len, folds)) == [4, 5, 5, 5, 5]
    assert deal(names, 5, seed=3) == folds and deal(names, 5, seed=4) != folds


def test_cross_fit_trains_each_fold_without_its_held_out_groups(tmp_path, capsys):
    out = tmp_path / "cf"
    args = ["pipeline", "--out", str(out), "--cross-fit", "2", "--quick", "--agent", "simulator", "--prm-model",
            "tiny", "--episodes", "16", "--eval-episodes", "4", "--questions-per-episode", "3", "--budgets", "1",
            "--methods", "helper", "prm_threshold", "knn"]
    assert main(args) == 0
    folds = json.loads((out / "folds.json").read_text())["folds"]
    collection = read_trajectories(out / "trajectories")
    every = _groups(collection)
    # One collection over every group of the generated catalog's train/ and test/ (6 + 2), each group one fold's.
    assert len(every) == 8 and sorted(g for fold in folds for g in fold) == sorted(every)
    pooled = pd.read_csv(out / "sweep" / "episodes.csv")
    for k, held_out in enumerate(folds):
        fold = out / f"fold{k}"
        # What the fold trained on: the collection's rows of the other groups, all of them, and nothing else.
        rows = read_trajectories(fold / "trajectories")
        assert _groups(rows) == every - set(held_out)
        assert rows.height == collection.filter(
            ~pl.col("task_id").map_elements(task_group, return_dtype=pl.String).is_in(held_out)).height
        # The PRM, its out-of-fold scores, the solve and the helper read that folder alone.
        metrics = json.loads((fold / "prm" / "metrics.json").read_text())
        assert metrics["config"]["data"] == str(fold / "trajectories")
        oof = read_shard(fold / "prm" / "oof_scores.parquet", require=("episode_id",))
        assert set(oof["episode_id"].to_list()) <= set(rows["episode_id"].to_list())
        labels = read_shard(fold / "solve" / "labels.parquet", require=("episode_id", "task_id"))
        assert not _groups(labels) & set(held_out) and labels.height == rows.height
        helper = json.loads((fold / "helper" / "helper.json").read_text())
        assert helper["labels_from"].endswith("solve")
        # The sweep's trained methods (thresholds, kNN points) read the fold's solve; it played the held-out groups.
        summary = json.loads((fold / "sweep" / "summary.json").read_text())
        assert summary["config"]["train_data"] == str(fold / "solve")
        assert summary["knn"]["points"] == labels.height
        played = pd.read_csv(fold / "sweep" / "episodes.csv")
        assert set(played["group"]) == set(held_out)
        assert sorted(p.name for p in (fold / "data" / "train").iterdir()) == sorted(every - set(held_out))
        assert set(pooled.loc[pooled["fold"] == k, "group"]) == set(held_out)
    # Pooled: every fold's episodes, every group a test group once; `helpgate report` reads it as one run.
    assert len(pooled) == sum(len(pd.read_csv(out / f"fold{k}" / "sweep" / "episodes.csv")) for k in range(2))
    assert set(pooled["group"]) == every and pooled["episode_id"].nunique() == 8
    helper = pooled[pooled["method"] == "helper"]
    assert (helper["interventions"] <= helper["budget"]).all()
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path / "report.md"), "--budgets", "1"]) == 0
    table = (tmp_path / "report.md").read_text()
    assert "| productqa (simulator) | 1 | 8 |" in table and "| knn |" in table
    # Run again: every stage of the root and of each fold is finished, nothing is redone.
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "fold0: already finished" in printed and "sweep: already finished" in printed
    # A run stopped before its last fold: the finished folds pooled alone, the summary naming them.
    (out / "fold1" / ".done").unlink()
    summary = pool_finished(out, PipelineConfig)
    assert summary["cross_fit"]["pooled"] == [0]
    alone = pd.read_csv(out / "sweep" / "episodes.csv")
    assert set(alone["group"]) == set(json.loads((out / "folds.json").read_text())["folds"][0])
    assert len(alone) == len(pd.read_csv(out / "fold0" / "sweep" / "episodes.csv"))


def test_cross_fit_is_refused_where_it_cannot_work(tmp_path, capsys):
    base = ["pipeline", "--agent", "simulator", "--prm-model", "tiny", "--quick"]
    assert main([*base, "--out", str(tmp_path / "a"), "--cross-fit", "1"]) == 2
    assert "cross_fit=1: give 2 or more folds" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "b"), "--cross-fit", "9"]) == 2
    assert "the data has 8 groups" in capsys.readouterr().err


def test_a_fold_root_links_its_groups_and_names_are_one_groups(tmp_path):
    from helper.commands.cross_fit import groups_of, link_root

    root = tmp_path / "root"
    for split, names in (("train", ["a", "b"]), ("test", ["c"])):
        for name in names:
            (root / split / name).mkdir(parents=True)
            (root / split / name / "qa.jsonl").write_text("")
    found = groups_of(root)
    assert sorted(found) == ["a", "b", "c"]
    linked = link_root(tmp_path / "fold", {"train": [found["a"]], "test": [found["c"]]})
    assert sorted(p.name for p in (linked / "train").iterdir()) == ["a"]
    # A resumed fold with other groups keeps only its own links.
    link_root(tmp_path / "fold", {"train": [found["b"]], "test": [found["c"]]})
    assert sorted(p.name for p in (linked / "train").iterdir()) == ["b"]
    (root / "test" / "a").mkdir()
    (root / "test" / "a" / "qa.jsonl").write_text("")
    with pytest.raises(ValueError, match="group 'a' is in"):
        groups_of(root)
