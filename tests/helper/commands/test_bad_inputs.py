"""Bad inputs end in one line naming what is wrong and exit code 2, never a traceback
(benchmarks/trust/bad_inputs.py makes the full table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agile.envs.catalog_generator import default_catalog_dir
from helper.commands.cli import gives_experiment_option, main
from helper.experiment_options import EXPERIMENT_ENTRY
from one_line_errors import one_error_line
from prm.verifiers.model import ProcessRewardModel
from prm.data.synthetic import synthetic_frame
from productqa_slice import SLICE
from trajectories.shards import mark_complete


def test_collect_values_out_of_range(tmp_path, capsys):
    catalog = str(default_catalog_dir(seed=0))
    assert main(["collect", "--data", catalog, "--explore-p", "1.5", "--out", str(tmp_path / "a")]) == 2
    assert "explore_p" in one_error_line(capsys)
    assert main(["collect", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "b")]) == 2
    assert str(tmp_path / "nowhere") in one_error_line(capsys)


def test_prm_folder_of_another_backbone(tmp_path, capsys):
    prm = ProcessRewardModel.create("tiny", head="value")
    folder = prm.save(tmp_path / "prm")
    settings = json.loads((folder / "prm_config.json").read_text())
    settings["hidden_size"] = settings["hidden_size"] * 2  # a head made for a wider backbone
    (folder / "prm_config.json").write_text(json.dumps(settings))
    (tmp_path / "data").mkdir()
    synthetic_frame(episodes=2, seed=0).write_parquet(tmp_path / "data" / "part-0.parquet")
    mark_complete(tmp_path / "data")
    assert main(["prm", "score", "--data", str(tmp_path / "data"), "--model", str(folder),
                 "--out", str(tmp_path / "scored"), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("helpgate prm score: error: ") and "another backbone" in line
    with pytest.raises(ValueError, match="another backbone"):
        main(["prm", "score", "--data", str(tmp_path / "data"), "--model", str(folder),
              "--out", str(tmp_path / "scored"), "--no-progress", "--debug"])


def test_corrupt_sft_data_names_file_and_line(tmp_path, capsys):
    data = tmp_path / "sft.jsonl"
    data.write_text('{"input_ids": [1, 2], "action_mask": [0, 1]}\n{"input_ids": [1, 2\n')
    assert main(["agile", "sft", "--model", "tiny", "--data-file", str(data), "--device", "cpu",
                 "--out", str(tmp_path / "sft"), "--no-save"], experiments=True) == 2
    assert f"{data}:2: not a JSON line" in one_error_line(capsys)


def test_constrained_ppo_refuses_a_critic_and_a_checkpoint_of_another_run(tmp_path, capsys):
    assert main(["agile", "ppo", "--model", "tiny", "--decoding", "constrained", "--estimator", "gae",
                 "--device", "cpu", "--out", str(tmp_path / "a")], experiments=True) == 2
    assert "estimator loop or grpo" in one_error_line(capsys)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "checkpoint-p0.json").write_text("{")
    # The test slice, not the default ../shared/productqa: a bare clone has nothing beside it.
    assert main(["agile", "ppo", "--model", "tiny", "--device", "cpu", "--data", str(SLICE),
                 "--out", str(tmp_path / "b")]) == 2
    assert "checkpoint-p0.json" in one_error_line(capsys)


# -- the cases of benchmarks/trust/bad_inputs.py, a sample of each group, in process --------------------
PLUGINS = '''
from examples.arith_chain import make_agent, make_episodes


def env_raises(split, count, seed):
    raise RuntimeError("the task server is down")


class _Strings:
    name = "strings"

    def act(self, observations):
        return [str(o.step) for o in observations]


def agent_strings():
    return _Strings()


def agent_raises():
    raise KeyError("api_key")
'''
CHAIN_ENV, CHAIN_AGENT = "examples.arith_chain:make_episodes", "examples.arith_chain:make_agent"


@pytest.fixture(scope="module")
def solved_dirs(tmp_path_factory):
    from helper_data import solved, trajectories

    from helper.solve.distill import DistillConfig
    from helper.solve.distill import run as distill

    root = tmp_path_factory.mktemp("good")
    data = trajectories(root / "data", n=24)
    solve_dir = solved(root / "solve", data)
    distill(DistillConfig(labels=str(solve_dir), prm="none", out=str(root / "helper")))
    return data, solve_dir, root / "helper"


@pytest.mark.parametrize("options, names", [
    (["--bins", "1000000000"], "bins=1000000000"),      # exabytes of tables: refused before any allocation
    (["--step-buckets", "1000000000"], "step_buckets=1000000000"),
    (["--smoothing", "nan"], "--smoothing nan"),
    (["--advice-cost", "inf"], "--advice-cost inf"),
    (["--bins", "0"], "bins=0"),
    (["--pessimism", "-1"], "pessimism=-1"),
    (["--pessimism", "1", "--objective", "reward"], "--objective success"),
])
def test_solve_numbers_are_refused_before_work(solved_dirs, tmp_path, capsys, options, names):
    data = solved_dirs[0]
    argv = ["solve", "--data", str(data), *options, "--out", str(tmp_path / "s")]
    experiments = gives_experiment_option(argv)  # an experiment's option: refused on its own entry's line
    assert main(argv, experiments=experiments) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"{EXPERIMENT_ENTRY if experiments else 'helpgate'} solve: error: ") and names in line
    assert not (tmp_path / "s" / "solve.json").exists()


@pytest.mark.parametrize("column, value", [("prm_score", 1.5), ("budget_left", -3), ("step", -1)])
def test_a_column_out_of_range_names_file_and_column(solved_dirs, tmp_path, capsys, column, value):
    import polars as pl

    shard = next(solved_dirs[0].glob("*.parquet"))
    (tmp_path / "d").mkdir()
    pl.read_parquet(shard).with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(value)).otherwise(pl.col(column)).alias(column)
    ).write_parquet(tmp_path / "d" / shard.name)
    (tmp_path / "d" / "manifest.json").write_bytes((shard.parent / "manifest.json").read_bytes())
    assert main(["solve", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "s")]) == 2
    line = one_error_line(capsys)
    assert str(tmp_path / "d" / shard.name) in line and f"column {column!r}" in line


def test_distill_refuses_a_stale_policy_and_max_rows_0(solved_dirs, tmp_path, capsys):
    import shutil

    solve_dir = tmp_path / "solve"
    shutil.copytree(solved_dirs[1], solve_dir)
    assert main(["distill", "--labels", str(solve_dir), "--prm", "none", "--max-rows", "0",
                 "--out", str(tmp_path / "h0")], experiments=True) == 2
    assert "max_rows=0" in one_error_line(capsys)
    shutil.copy(solve_dir / "policy_c2.npz", solve_dir / "policy_c4.npz")
    assert main(["distill", "--labels", str(solve_dir), "--prm", "none", "--out", str(tmp_path / "h")]) == 2
    assert "policy_c4.npz not written by the solve" in one_error_line(capsys)
    assert not (tmp_path / "h").exists()


@pytest.mark.parametrize("damage, names", [
    (lambda h: (h / "helper.json").write_text("[]"), "helper.json: a JSON list"),
    (lambda h: (h / "policy.npz").write_bytes((h / "policy.npz").read_bytes()[:64]), "policy.npz: not a readable"),
])
def test_a_broken_helper_folder_is_one_line(solved_dirs, tmp_path, capsys, damage, names):
    import shutil

    helper = Path(shutil.copytree(solved_dirs[2], tmp_path / "helper"))
    damage(helper)
    assert main(["evaluate", "--helper", str(helper), "--episodes", "2", "--out", str(tmp_path / "ev")]) == 2
    assert names in one_error_line(capsys)


def _collect(out, env=CHAIN_ENV, agent=CHAIN_AGENT, episodes="4"):
    return main(["collect", "--env", env, "--agent", agent, "--episodes", episodes, "--shard-size", "2",
                 "--explore-p", "0.5", "--out", str(out)])


def test_plugin_failures_name_the_plugin_and_a_failed_collect_does_not_block_its_rerun(tmp_path, capsys,
                                                                                      monkeypatch):
    (tmp_path / "mine.py").write_text(PLUGINS)
    (tmp_path / "typo.py").write_text("def make_episodes(split, count seed):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "t"
    assert _collect(out, env="mine:env_raises") == 2
    assert "mine:env_raises: the factory raised RuntimeError: the task server is down" in one_error_line(capsys)
    assert _collect(out, env="typo:make_episodes") == 2
    assert f"SyntaxError at {tmp_path / 'typo.py'}:1" in one_error_line(capsys)
    assert _collect(out, agent="mine:agent_raises") == 2
    assert "mine:agent_raises: the factory raised KeyError: 'api_key'" in one_error_line(capsys)
    assert _collect(out, agent="mine:agent_strings") == 2
    assert "agent 'strings' returned a str (" in one_error_line(capsys)
    # None of the failed runs finished a shard: the corrected command runs, it is not refused as "another config".
    assert _collect(out) == 0
    capsys.readouterr()
    assert len(json.loads((out / "manifest.json").read_text())["shards"]) == 2


def test_shards_that_disagree_with_their_manifest_are_refused(tmp_path, capsys):
    import shutil

    out = tmp_path / "t"
    assert _collect(out) == 0
    capsys.readouterr()
    shutil.copy(out / "shard-00000.parquet", out / "shard-00001.parquet")  # another shard's episodes
    assert _collect(out) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"helpgate collect: error: {out / 'shard-00001.parquet'}: ")
    assert "another run" in line or "recorded" in line
    (out / "shard-00001.parquet").unlink()
    (out / "manifest.json").write_text('["shard-00000.parquet"]')
    assert _collect(out) == 2
    assert f"{out / 'manifest.json'}: a JSON list, not a manifest" in one_error_line(capsys)
