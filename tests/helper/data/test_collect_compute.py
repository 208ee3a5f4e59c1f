"""``--help-kinds compute:1 human:4`` on ProductQA: ``compute`` resolves to the base agent's own self-consistency
(``agile.executor.self_consistency``) on its loaded model, the rows name it with its cost, and a base agent that
has no LLM to sample is refused in one line before any file. A tiny random-initialised model, the bundled slice."""

from __future__ import annotations

import polars as pl
import pytest
from one_line_errors import one_error_line
from productqa_slice import SLICE

from agile.executor.self_consistency import SelfConsistencyAgent
from helper.data.collect import CollectConfig, actors, env_setup
from helper.data.collect import main as collect
from helper.stored_config import config_of
from trajectories.helps import HelpKind
from trajectories.manifest import helps_of
from trajectories.shards import read_trajectories

KINDS = ["--help-kinds", "compute:1", "human:4"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def argv(out, agent: str = "tiny", kinds=KINDS) -> list[str]:
    return ["--env", "productqa", "--data", str(SLICE), "--agent", agent, "--questions-per-episode", "3",
            "--episodes", "4", "--shard-size", "4", "--batch-size", "4", "--budget", "5", "--explore-p", "1.0",
            "--seed", "2", "--out", str(out), *kinds]


def test_rows_name_the_compute_help_and_its_cost(tmp_path, capsys):
    out = tmp_path / "traj"
    assert collect(argv(out)) == 0
    assert "kinds of help compute at 1, human at 4" in capsys.readouterr().out
    rows = read_trajectories(out)
    compute, human = (rows.filter(pl.col("help_kind") == kind) for kind in ("compute", "human"))
    assert compute.height >= 2 and human.height >= 1
    assert compute["help_cost"].to_list() == [1.0] * compute.height and set(human["help_cost"]) == {4.0}
    # The compute help writes the agent's own turns (an answer or a search), the human's is the advice.
    assert set(compute["actor"]) == {"strong"} and compute["intervened"].all()
    assert all(t.startswith(("[PredictAnswer]", "[SearchProduct]")) for t in compute["action_text"])
    assert set(human["action_text"]) == {"[SeekAdvice]"} and human["reward"].to_list() == [1.0] * human.height
    spent = rows.group_by("episode_id").agg(pl.col("help_cost").sum())["help_cost"]
    assert spent.max() <= 5 and set(rows.filter(pl.col("help_kind") == "")["help_cost"]) <= {0.0}
    assert helps_of(out) == [HelpKind("compute", 1.0), HelpKind("human", 4.0)]


def test_compute_runs_on_the_base_agents_loaded_model(tmp_path):
    config = config_of(CollectConfig, dict(env="productqa", data=str(SLICE), agent="tiny", out=str(tmp_path),
                                           budget=5, help_kinds=["compute@4:1", "human:4"]))
    base, helps = actors(env_setup(config), config)
    compute = helps[0].agent
    assert isinstance(compute, SelfConsistencyAgent) and (helps[0].name, compute.samples) == ("compute@4", 4)
    assert compute.decoder.model is base.policy.constrained.model  # one model, loaded once
    assert compute.decoder.cache is base.policy.constrained.cache
    assert helps[1].agent is None  # human: the episode's own advice


@pytest.mark.parametrize("agent, kinds, refused", [
    ("simulator", KINDS, "--help-kinds compute:1: 'compute' plays the majority of samples of the base agent's own "
                         "LLM under constrained decoding, and agent='simulator'"),
    ("tiny", ["--help-kinds", "compute@0:1", "human:4"], "--help-kinds compute@0:1: 'compute@0': give the samples "
                                                        "as compute@K"),
])
def test_a_compute_help_that_cannot_be_given_is_refused_in_one_line(tmp_path, capsys, agent, kinds, refused):
    out = tmp_path / "traj"
    assert collect(argv(out, agent, kinds)) == 2
    line = one_error_line(capsys)
    assert refused in line, line
    assert not out.exists() or not any(out.glob("*.parquet"))
