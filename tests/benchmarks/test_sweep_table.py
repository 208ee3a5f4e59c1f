"""benchmarks/setups/sweep_table.py: the RESULTS tables from a sweep folder, with paired differences."""

import importlib.util
import json
from pathlib import Path

import pandas as pd

from helper.evaluation.metrics import summarize

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "setups" / "sweep_table.py"


def load_script():
    spec = importlib.util.spec_from_file_location("sweep_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tables_and_paired_differences(tmp_path):
    # Four episodes; the helper gains episode 2 over prm_threshold at C=1 and loses none.
    outcome = {
        ("never", 0): [0, 0, 0, 1], ("always", 4): [1, 1, 1, 1],
        ("helper", 0): [0, 0, 0, 1], ("helper", 1): [1, 0, 1, 1],
        ("prm_threshold", 0): [0, 0, 0, 1], ("prm_threshold", 1): [1, 0, 0, 1],
        ("oracle_1step", 0): [0, 0, 0, 1], ("oracle_1step", 1): [1, 0, 1, 1],
        ("oracle", 0): [0, 0, 0, 1], ("oracle", 1): [1, 1, 0, 1],
    }
    used = {("always", 4): 4.0, ("helper", 1): 1.0, ("prm_threshold", 1): 0.75, ("oracle_1step", 1): 1.0,
            ("oracle", 1): 1.0}
    episodes = pd.DataFrame(
        [(m, c, f"e{i}", s, used.get((m, c), 0.0)) for (m, c), values in outcome.items() for i, s in enumerate(values)],
        columns=["method", "budget", "episode_id", "success", "interventions"],
    )
    sweep = episodes.groupby(["method", "budget"], as_index=False).agg(
        success=("success", "mean"), interventions=("interventions", "mean"), episodes=("success", "size"))
    sweep["ci_low"], sweep["ci_high"] = sweep.success, sweep.success
    sweep.to_csv(tmp_path / "sweep.csv", index=False)
    episodes.to_csv(tmp_path / "episodes.csv", index=False)
    (tmp_path / "summary.json").write_text(json.dumps(summarize(sweep)))

    text = load_script().tables(tmp_path)
    assert "| **helper** | 0.750 [0.75, 0.75] (1.00) |" in text
    assert "| prm_threshold | 0.500 [0.50, 0.50] (0.75) |" in text
    # Paired: differences 0, 0, +1, 0 -> mean +0.25; resampling 4 episodes can give 0 or 0.75.
    row = next(line for line in text.splitlines() if line.startswith("| prm_threshold | +"))
    assert row.startswith("| prm_threshold | +0.250 [+0.000, +0.750]")
    assert "always-level" in text
    # APGR: (0,0) (0.25, 2/3) then completed to (1,1): 0.25/3 + 0.75*5/6 = 0.708, 0.75 of it completed.
    assert "| 0.708 (0.75) | 0 / 0 |" in next(line for line in text.splitlines() if line.startswith("| **helper**"))
    # The one-step oracle is no bound: compared like a baseline; the oracle (a bound) is not.
    assert any(line.startswith("| oracle_1step | +0.000") for line in text.splitlines())
    assert not any(line.startswith(("| oracle | +", "| oracle | -")) for line in text.splitlines())


def test_paired_differences_resample_groups_where_episodes_carry_one():
    # The helper gains every episode of group a over random and ties group b: the difference is 1 on
    # a, 0 on b; two groups drawn with replacement give 0, 1/2, 1 with 1/4, 1/2, 1/4, so the interval
    # is [0, 1] (by hand); without the group column the same episodes give a narrower one.
    rows = [(m, 1, f"e{i}", "a" if i < 4 else "b", s)
            for m, values in (("helper", [1] * 8), ("random", [0] * 4 + [1] * 4)) for i, s in enumerate(values)]
    episodes = pd.DataFrame(rows, columns=["method", "budget", "episode_id", "group", "success"])
    table = load_script().paired_table(episodes, [1])
    assert "| random | +0.500 [+0.000, +1.000] |" in table and "(groups, then episodes)" in table
    flat = load_script().paired_table(episodes.drop(columns="group"), [1])
    low = float(next(line for line in flat.splitlines() if line.startswith("| random")).split("[")[1].split(",")[0])
    assert 0.0 < low < 0.5 and "(episodes; no group column)" in flat
