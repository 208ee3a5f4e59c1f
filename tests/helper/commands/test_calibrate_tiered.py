"""``helpgate calibrate`` on a tiered helper (several kinds of help, each at its price), end to end on the tiered
rapids at a tiny size (README's chain: collect with kinds, tiny PRM, solve --help-kinds, distill): the family is the
helper at every cost budget its table holds, most help first; the guarantee is the fixed-sequence choice of its own
calibration rows, with the member's cost and calls per kind; no calibration episode spends past its budget or a
kind past its cap; the certified member holds its target on fresh episodes; and a target out of reach, calibration
episodes the helper was trained on, a missing PRM and ``--family priced`` are each refused in one line, nothing
written."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from one_line_errors import one_error_line
from scipy import stats

from helper import HelperGate
from helper.commands.cli import gives_experiment_option, main
from helper.gates.certify import GUARANTEE_FILE, helper_fingerprint

NAMES = ["--env", "examples.tiered_rapids:make_episodes", "--agent", "examples.tiered_rapids:make_agent"]
PRICES = {"compute": 1.0, "stronger": 2.0, "human": 4.0}
CAPS = {"human": 1}
N, EPS, DELTA = 100, 0.75, 0.2  # target success 0.25: the helper at B = 6 makes about 0.4-0.5, at B = 0 under 0.1


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_torch_thread):
    root = tmp_path_factory.mktemp("tiered") / "run"
    kinds = [f"{k}:{p:g}" for k, p in PRICES.items()]
    steps = [
        ["collect", *NAMES, "--help-kinds", *kinds, "--help-caps", "human=1", "--budget", "6", "--episodes", "300",
         "--out", str(root / "trajectories")],
        ["prm", "train", "--data", str(root / "trajectories"), "--tag-after", "state", "--model", "tiny",
         "--pooling", "mean", "--target", "process", "--base-only", "--out", str(root / "prm")],
        ["prm", "score", "--data", str(root / "trajectories"), "--model", str(root / "prm"), "--out",
         str(root / "scored")],
        ["solve", "--data", str(root / "scored"), "--help-kinds", *kinds, "--help-caps", "human=1",
         "--budgets", "4", "6", "--out", str(root / "solve")],
        ["distill", "--labels", str(root / "solve"), "--prm", str(root / "prm"), "--out", str(root / "helper")],
    ]
    for argv in steps:  # the PRM's mean pooling and base-only rows are experiment options (prm train)
        assert main(argv, experiments=gives_experiment_option(argv)) == 0, argv
    return root


@pytest.fixture(scope="module")
def calibrated(run_dir):
    helper = run_dir / "helper"
    assert main(["calibrate", "--helper", str(helper), *NAMES, "--episodes", str(N), "--eps", str(EPS), "--delta",
                 str(DELTA)]) == 0
    return helper


def test_the_guarantee_is_the_fixed_sequence_choice_of_its_own_rows_with_cost_and_calls(calibrated):
    from helper.solve.tiered_family import budgets

    record = json.loads((calibrated / GUARANTEE_FILE).read_text())
    table = pd.read_csv(calibrated / "calibration" / "episodes.csv")
    helper = HelperGate.load(calibrated)
    # The family: every cost budget the solved table holds, most help first, fixed by the folder alone.
    solved = budgets(helper)
    assert solved == [6, 5, 4, 3, 2, 1, 0]
    assert record["family"] == "tiered" and [m["budget"] for m in record["members"]] == solved
    assert record["kinds"] == PRICES and record["caps"] == CAPS and record["n"] == N
    assert record["member"]["budget"] in solved
    ids = [set(table[table["budget"] == b]["episode_id"]) for b in solved]
    assert all(len(s) == N and s == ids[0] for s in ids)  # every member played the same episodes
    chosen = None
    for i, member in enumerate(record["members"]):
        rows = table[table["member"] == i]
        assert (rows["budget"] == member["budget"]).all()
        k = int((rows["success"] >= 1.0).sum())
        assert member["successes"] == k and member["success"] == pytest.approx(rows["success"].mean())
        assert member["cost"] == pytest.approx(rows["cost"].mean())
        assert member["calls"] == pytest.approx({kind: rows[f"calls_{kind}"].mean() for kind in PRICES})
        assert member["interventions"] == pytest.approx(sum(member["calls"].values()))
        assert member["p_value"] == pytest.approx(stats.binom.sf(k - 1, N, 1 - EPS), rel=1e-12)
        if member["p_value"] > DELTA:
            assert member["tested"] and not member["passed"]
            assert not any(m["tested"] for m in record["members"][i + 1:])
            break
        assert member["passed"]
        chosen = member
    assert chosen is not None and record["member"] == chosen
    assert record["members"][0]["cost"] > record["members"][-1]["cost"] == 0.0  # B = 0 calls nothing
    # HelperGate.load exposes it, at every budget, as the one-kind gate does; the certified gate is at B.
    from helper.solve.priced_family import certified_gate

    assert record["helper_fingerprint"] == helper_fingerprint(calibrated)
    assert helper.guarantee == record and helper.with_budget(0).guarantee == record
    assert certified_gate(calibrated).budget == chosen["budget"]


def test_no_calibration_episode_spends_past_its_budget_or_a_kind_past_its_cap(calibrated):
    table = pd.read_csv(calibrated / "calibration" / "episodes.csv")
    spent = sum(table[f"calls_{kind}"] * price for kind, price in PRICES.items())
    assert (spent == table["cost"]).all()  # the cost is the calls at their prices
    assert (table["cost"] <= table["budget"] + 1e-9).all()
    assert (table["calls_human"] <= CAPS["human"]).all()
    assert table.groupby("budget")["cost"].max()[6] > 4  # the top member does spend past the next kind's price


def test_the_certified_member_holds_its_target_on_fresh_episodes(calibrated):
    """Validity by simulation: the certified budget on 200 episodes of another seed succeeds at least the target,
    less a sampling slack (3 standard errors)."""
    from examples.tiered_rapids import make_agent, make_episodes
    from helper.commands.calibrate import helps_of
    from helper.solve.tiered_family import play

    record = json.loads((calibrated / GUARANTEE_FILE).read_text())
    budget = record["member"]["budget"]
    helper = HelperGate.load(calibrated)

    class Setup:  # the env setup helps_of reads: the episodes' own kinds
        @staticmethod
        def episodes(indices, seed, split=None):
            return make_episodes("test", len(indices), seed)

    helps = helps_of(helper, Setup(), 3000)
    assert [(h.name, h.price, h.cap) for h in helps] == [(k, p, CAPS.get(k)) for k, p in PRICES.items()]
    rows = pd.DataFrame(play(make_episodes("test", 200, 3000), make_agent(), helps, helper.with_budget(budget),
                             budget, seed=3000))
    success, target = rows["success"].mean(), record["target"]
    assert success >= target - 3 * (target * (1 - target) / len(rows)) ** 0.5, (success, target)
    assert (rows["cost"] <= budget).all() and (rows["calls_human"] <= 1).all()


def test_a_target_above_every_member_is_refused_in_one_line_naming_the_highest(calibrated, capsys):
    from helper.gates.certify import lower_bound

    before = {p: (calibrated / p).read_bytes() for p in (GUARANTEE_FILE, "calibration/episodes.csv")}
    top = json.loads(before[GUARANTEE_FILE])["members"][0]
    eps = round(1 - top["success"] - 0.05, 3)  # a target above the most-help member's own calibration success
    capsys.readouterr()  # three of the members (--budgets), the most-help one first: the refusal is the same
    assert main(["calibrate", "--helper", str(calibrated), *NAMES, "--episodes", str(N), "--eps", str(eps),
                 "--delta", str(DELTA), "--budgets", "0", "3", "6"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("helpgate calibrate:")]
    assert len(err) == 1 and "the most-help member, B=6" in err[0], err
    assert f"highest success this calibration can certify is {lower_bound(top['successes'], N, DELTA):.3f}" in err[0]
    assert {p: (calibrated / p).read_bytes() for p in before} == before  # nothing written


def test_family_priced_and_a_budget_the_table_does_not_hold_are_refused_in_one_line(calibrated, capsys):
    before = (calibrated / GUARANTEE_FILE).read_bytes()
    capsys.readouterr()
    assert main(["calibrate", "--helper", str(calibrated), *NAMES, "--episodes", "10", "--family", "priced"]) == 2
    line = one_error_line(capsys)
    assert "family=priced" in line and "tiered helper" in line and "use the default family" in line
    assert main(["calibrate", "--helper", str(calibrated), *NAMES, "--episodes", "10", "--budgets", "7", "2"]) == 2
    line = one_error_line(capsys)
    assert "budgets=[7, 2]" in line and "6 down to 0" in line and "7 is not one of them" in line, line
    assert (calibrated / GUARANTEE_FILE).read_bytes() == before


def test_episodes_the_helper_was_trained_on_and_a_missing_prm_are_refused(run_dir, tmp_path, capsys):
    helper = run_dir / "helper"
    capsys.readouterr()
    # --split is an experiment's option (the product calibrates on held-out episodes): its entry's line.
    assert main(["calibrate", "--helper", str(helper), *NAMES, "--episodes", "8", "--split", "train",
                 "--seed", "0"], experiments=True) == 2
    assert "solve and distill rows" in one_error_line(capsys)
    # A copy whose recorded PRM is not there: its decisions would take the conservative rule, not the helper's.
    moved = tmp_path / "helper"
    shutil.copytree(helper, moved, ignore=shutil.ignore_patterns(GUARANTEE_FILE, "calibration"))
    config = json.loads((moved / "helper.json").read_text())
    (moved / "helper.json").write_text(json.dumps(config | {"prm": "../no-prm", "prm_absolute": str(tmp_path / "no")}))
    assert main(["calibrate", "--helper", str(moved), *NAMES, "--episodes", "8"]) == 2
    line = one_error_line(capsys)
    assert "PRM" in line and "--allow-fallback" in line, line
    assert not (moved / GUARANTEE_FILE).exists() and not (moved / "calibration").exists()
    # Allowed, the guarantee says so and covers the gate that decides the same way (no PRM) only.
    assert main(["calibrate", "--helper", str(moved), *NAMES, "--episodes", "8", "--eps", "0.99", "--delta",
                 "0.5", "--allow-fallback"]) == 0
    record = json.loads((moved / GUARANTEE_FILE).read_text())
    assert record["family"] == "tiered" and "PRM" in record["fallback"]
    assert HelperGate.load(moved, prm=False).guarantee == record


def test_a_kind_the_helper_names_apart_from_its_actor_is_answered_by_that_actor(calibrated):
    """helper.json's ``actors`` (a kind collected as ``NAME=ACTOR:PRICE``): calibrate plays the kind by that actor,
    not by the episodes' own expert of the same name."""
    from helper.commands.calibrate import helps_of
    from helper.data.environment import EnvSetup, EnvSpec

    helper = HelperGate.load(calibrated)
    setup = EnvSetup(EnvSpec(env=NAMES[1], agent=NAMES[3]), "test")
    assert dict((h.name, h.agent) for h in helps_of(helper, setup, 3000))["stronger"] is None  # the episodes' own
    helper.actors = {"stronger": "examples.tiered_rapids:make_stronger"}
    helps = {h.name: h for h in helps_of(helper, setup, 3000)}
    assert helps["stronger"].agent is not None and helps["stronger"].price == PRICES["stronger"]
