"""Content-addressed shards: manifests record each shard's SHA-256, and every reader refuses a shard whose bytes
differ (another run's shard copied over ours, an edited one); a folder from before the hashes still reads; a
manifest field of the wrong type is refused naming the field, never read as "no check"."""

import hashlib
import json
import re
import shutil

import polars as pl
import pytest

from helper.commands.cli import main
from helper.data.collect import CollectConfig, run
from helper.stored_config import config_of
from trajectories.manifest import require_complete
from trajectories.schema import SchemaError
from trajectories.shards import mark_complete, read_trajectories, write_shard

PLUGIN = dict(env="examples.arith_chain:make_episodes", agent="examples.arith_chain:make_agent", episodes=8,
              shard_size=4, budget=2)


def collect(out, explore_p):
    return run(config_of(CollectConfig, **PLUGIN, explore_p=explore_p, out=str(out)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two collections of the same episodes (same ids, same rows) at other intervention rates: ours and theirs."""
    root = tmp_path_factory.mktemp("runs")
    collect(root / "ours", [0.0])
    collect(root / "theirs", [0.5])
    return root


def mixed(runs, tmp_path, source="theirs"):
    """Ours, with theirs' first shard copied over ours (same name, same episode ids, same row count)."""
    folder = shutil.copytree(runs / "ours", tmp_path / "mixed")
    shutil.copy(runs / source / "shard-00000.parquet", folder / "shard-00000.parquet")
    return folder


def test_every_shard_is_recorded_with_the_sha256_of_its_bytes(runs):
    ours = pl.read_parquet(runs / "ours" / "shard-00000.parquet")
    theirs = pl.read_parquet(runs / "theirs" / "shard-00000.parquet")
    assert ours.height == theirs.height and set(ours["episode_id"]) == set(theirs["episode_id"])  # the old checks pass
    manifest = json.loads((runs / "ours" / "manifest.json").read_text())
    for name, entry in manifest["shards"].items():
        assert entry["sha256"] == hashlib.sha256((runs / "ours" / name).read_bytes()).hexdigest()


def test_another_runs_shard_copied_over_ours_is_refused_by_every_reader(runs, tmp_path, capsys):
    folder = mixed(runs, tmp_path)
    shard = str(folder / "shard-00000.parquet")
    with pytest.raises(SchemaError, match=re.escape(shard) + r": its bytes \(sha256 \w+…\) are not the shard"):
        read_trajectories(folder)
    capsys.readouterr()
    commands = [["prm", "export", "--data", str(folder), "--out", str(tmp_path / "export.jsonl")],
                ["prm", "score", "--data", str(folder), "--model", str(tmp_path / "any-prm"), "--out",
                 str(tmp_path / "scored")]]
    for argv in commands:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and shard in err and "another run" in err, err
    assert not (tmp_path / "export.jsonl").exists() and not (tmp_path / "scored").exists()
    # collect's rerun skips finished shards: it refuses ours being another run's instead of marking it complete.
    with pytest.raises(SchemaError, match=re.escape(shard)):
        collect(folder, [0.0])


def score_in_own_code(folder):
    """Add a prm_score to every shard and declare them finished, as one's own code would (mark_complete)."""
    for shard in sorted(folder.glob("*.parquet")):
        frame = pl.read_parquet(shard)
        write_shard(frame.with_columns(pl.lit(0.5).alias("prm_score")), shard)
    mark_complete(folder, json.loads((folder / "manifest.json").read_text())["config"])


def test_solve_refuses_a_scored_shard_of_another_run(runs, tmp_path, capsys):
    for name in ("ours", "theirs"):
        score_in_own_code(shutil.copytree(runs / name, tmp_path / "scored" / name))
    folder = mixed(tmp_path / "scored", tmp_path)
    assert main(["solve", "--data", str(folder), "--budgets", "1", "--bins", "2", "--out", str(tmp_path / "solve")]) == 2
    err = capsys.readouterr().err.strip()
    assert str(folder / "shard-00000.parquet") in err and len(err.splitlines()) == 1
    assert not (tmp_path / "solve" / "solve.json").exists()


def test_an_edited_shard_is_refused_naming_it(runs, tmp_path):
    folder = shutil.copytree(runs / "ours", tmp_path / "edited")
    shard = folder / "shard-00001.parquet"
    frame = pl.read_parquet(shard)
    frame.with_columns(pl.col("success").reverse()).write_parquet(shard)  # same rows, ids and types
    with pytest.raises(SchemaError, match=re.escape(str(shard)) + ": its bytes"):
        read_trajectories(folder)


def test_a_folder_written_before_the_hashes_reads_as_before(runs, tmp_path):
    folder = mixed(runs, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["shards"].values():
        del entry["sha256"]  # an older release recorded none: nothing to compare
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert read_trajectories(folder).height == sum(pl.read_parquet(p).height for p in folder.glob("*.parquet"))


@pytest.mark.parametrize("edit, named", [
    (lambda m: m["shards"].update({"shard-00000.parquet": 5}), "shards['shard-00000.parquet']=5 is not an object"),
    (lambda m: m.update(complete="true"), "complete='true' is not true or false"),
    (lambda m: m.update(complete=1), "complete=1 is not true or false"),
    (lambda m: m["shards"]["shard-00001.parquet"].update(rows="17"), "shards['shard-00001.parquet'].rows='17'"),
    (lambda m: m["shards"]["shard-00001.parquet"].update(episodes="e1"), "shards['shard-00001.parquet'].episodes='e1', expected a list"),
    (lambda m: m["shards"]["shard-00001.parquet"].update(sha256=7), "shards['shard-00001.parquet'].sha256=7, expected 64 hex digits"),
    (lambda m: m.update(config=[]), "config=[] is not an object"),
    (lambda m: m["config"].update(budget="2"), "config.budget='2', expected a whole number >= 0"),  # check was off
    (lambda m: m["config"].update(budget=-1), "config.budget=-1, expected a whole number >= 0"),
    (lambda m: m["config"].update(budget=True), "config.budget=True, expected a whole number >= 0"),
])
def test_a_manifest_field_of_the_wrong_type_is_refused_naming_it(runs, tmp_path, edit, named):
    folder = shutil.copytree(runs / "ours", tmp_path / "typed")
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for read in (read_trajectories, require_complete):
        with pytest.raises(SchemaError, match=re.escape(f"{folder / 'manifest.json'}: {named}")):
            read(folder)


def test_solve_refuses_an_episode_whose_rows_disagree_on_its_success(runs, tmp_path, capsys):
    """An edited shard, its manifest written to match: solve read whichever row's success it estimated with."""
    folder = shutil.copytree(runs / "ours", tmp_path / "outcome")
    score_in_own_code(folder)
    shard = folder / "shard-00001.parquet"
    frame = pl.read_parquet(shard)
    first = frame["episode_id"][0]
    flipped = pl.when((pl.col("episode_id") == first) & (pl.col("step") == 0)).then(1.0 - pl.col("success"))
    write_shard(frame.with_columns(flipped.otherwise(pl.col("success")).alias("success")), shard)
    mark_complete(folder, json.loads((folder / "manifest.json").read_text())["config"])
    capsys.readouterr()
    assert main(["solve", "--data", str(folder), "--budgets", "1", "--bins", "2", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"episode {first!r} has success 0 on one row and 1 on another" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s" / "solve.json").exists()
