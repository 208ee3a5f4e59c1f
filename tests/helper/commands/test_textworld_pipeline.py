"""The whole pipeline on TextWorld, through the ``helpgate`` entry points, with no TextWorld code path
of its own: collect (simulator, explore-p mixture) → prm train (tiny) → prm score → solve →
distill → sweep on held-out games.

The first run generates the games (~2 s each; 4 train and 2 test games) into the usual cache.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import polars as pl
import pytest

try:
    import textworld  # noqa: F401
except ImportError as error:  # the extra is optional for users; CI installs it
    print(f"skipping tests/helper/commands/test_textworld_pipeline.py: textworld is not importable ({error}); "
          f"pip install 'helpgate[textworld]' to run it.")
    pytest.skip(f"textworld is not importable: {error}", allow_module_level=True)

from agile.envs.textworld_env import default_horizon
from helper.commands.cli import gives_experiment_option, main
from trajectories.shards import read_trajectories

# The tiny backbone's 2048-token context is shorter than a TextWorld episode: the PRM cuts old
# history, as it is built to, and warns each time.
pytestmark = pytest.mark.filterwarnings("ignore::prm.verifiers.model.ContextTruncationWarning")

GAMES = ["--env", "textworld", "--tw-quest-lengths", "3", "--tw-sim-p", "0.3"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # Games go to the usual cache ($HELPGATE_CACHE/textworld): they are a pure function of their
    # spec, and that cache also holds the converted tokenizer the tiny model uses (~20 s to redo).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")  # the machine is shared: one thread per process
        out = tmp_path_factory.mktemp("tw-run")
        yield out, _pipeline(out)


def _pipeline(out) -> dict:
    traj, prm, solve, helper, sweep = (str(out / name) for name in ("traj", "prm", "solve", "helper", "sweep"))
    steps = {
        "collect": ["collect", *GAMES, "--tw-games", "4", "--episodes", "24", "--explore-p", "0", "0.2", "0.5",
                    "--budget", "2", "--shard-size", "12", "--batch-size", "12", "--out", traj],
        "prm train": ["prm", "train", "--data", traj, "--out", prm, "--model", "tiny", "--head", "value",
                      "--tag-after", "state", "--head-steps", "20", "--l2", "0.01", "--device", "cpu",
                      "--state-features"],  # the TextWorld default: the gate then reads Observation.features
        "prm score": ["prm", "score", "--data", traj, "--model", prm, "--device", "cpu", "--no-progress"],
        "solve": ["solve", "--data", traj, "--budgets", "1", "2", "--bins", "3", "--out", solve],
        "distill": ["distill", "--labels", solve, "--prm", prm, "--out", helper],
        "sweep": ["sweep", *GAMES, "--tw-games", "2", "--helper", helper, "--out", sweep, "--episodes", "4",
                  "--budgets", "0", "1", "2", "--methods", "helper", "first_k", "random", "exact_optimal",
                  "--ci-resamples", "50", "--device", "cpu"],
    }
    codes = {}
    for name, argv in steps.items():
        started = time.perf_counter()
        # TextWorld's game settings and the PRM's head options are experiment options: their entry's line.
        codes[name] = main(argv, experiments=gives_experiment_option(argv))
        print(f"[tw pipeline] {name}: {time.perf_counter() - started:.1f} s")
    return codes


def test_every_stage_runs_and_writes_its_files(run_dir):
    out, codes = run_dir
    assert codes == dict.fromkeys(codes, 0)
    frame = read_trajectories(out / "traj")
    assert frame["episode_id"].n_unique() == 24 and set(frame["env"]) == {"textworld"}
    assert sorted(set(frame["explore_p"])) == [0.0, 0.2, 0.5]
    assert frame.group_by("episode_id").agg(pl.col("intervened").sum())["intervened"].max() <= 2
    assert frame["prm_score"].is_between(0.0, 1.0).all()
    read = json.loads((out / "prm" / "metrics.json").read_text())["signals"]
    assert read == [f"state:{name}" for name in ("n_admissible", "progress", "steps_left",
                                                 "steps_since_progress")]
    for path in ("prm", "solve/labels.parquet", "helper/helper.json", "sweep/sweep.csv", "sweep/summary.json",
                 "sweep/sweep.png"):
        assert (out / path).exists(), path


def test_sweep_covers_methods_and_budgets_within_bounds(run_dir):
    out, _ = run_dir
    sweep = pd.read_csv(out / "sweep" / "sweep.csv")
    methods = set(sweep["method"])
    assert {"helper", "first_k", "random", "never", "always"} <= methods
    for method in ("helper", "first_k", "random"):
        assert sorted(sweep.loc[sweep["method"] == method, "budget"]) == [0, 1, 2]
    assert sweep["success"].between(0.0, 1.0).all()
    assert (sweep["interventions"] <= sweep["budget"]).all()
    assert (sweep["episodes"] == 4).all()
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert "exact_optimal" not in methods and "textworld" in summary["skipped"]["exact_optimal"]
    # "always" may intervene at every move: its budget is the longest episode a game allows
    assert int(sweep.loc[sweep["method"] == "always", "budget"].iloc[0]) == default_horizon(3)


def test_the_llm_agent_runs_the_pipeline_on_two_tiny_games(tmp_path):
    """TextWorld played by ``TextWorldLLMAgent`` (a tiny random model ranking the admissible commands), every stage
    end to end on two games, the sweep with the helper, the full-strength threshold (under a cap and with no cap)
    and random: the set-up of the LLM TextWorld benchmark, small."""
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        code = main(["pipeline", "--out", str(out), "--env", "textworld", "--agent", "tiny", "--tw-games", "2",
                     "--tw-quest-lengths", "1", "--quick", "--episodes", "16", "--eval-episodes", "2", "--budgets",
                     "1", "--prm-model", "tiny", "--methods", "helper", "helper_priced", "prm_threshold", "random",
                     "--device", "cpu"], experiments=True)
    assert code == 0
    sweep = pd.read_csv(out / "sweep" / "sweep.csv")
    assert {"helper", "prm_threshold", "prm_threshold_nocap", "helper_priced", "random"} <= set(sweep["method"])
    capped = sweep[sweep["method"].isin(["helper", "prm_threshold", "random"])]
    assert (capped["interventions"] <= capped["budget"]).all() and sweep["success"].between(0, 1).all()
    frame = read_trajectories(out / "trajectories")
    assert frame["episode_id"].n_unique() == 16 and set(frame["env"]) == {"textworld"}
    assert json.loads((out / "pipeline.json").read_text())["agent"] == "tiny"
    assert (out / "helper" / "members" / "selection.json").is_file()
