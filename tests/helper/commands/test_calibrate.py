"""``helpgate calibrate`` end to end on a tiny plain-cue run (tiny PRM): the guarantee it writes is the fixed-sequence
choice recomputed from its own per-episode table, it round-trips through ``HelperGate`` and ``/health``, and it
refuses calibration episodes the run already used and a target out of reach."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from helper import HelperGate
from helper.commands.cli import gives_experiment_option, main
from helper.gates.certify import GUARANTEE_FILE, helper_fingerprint

NAMES = ["--env", "examples.plain_cue:make_episodes", "--agent", "examples.plain_cue:make_agent"]
N = 40


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("plain-cue") / "run"
    assert main(["pipeline", "--out", str(out), "--quick", *NAMES, "--prm-model", "tiny", "--prm-pooling", "mean",
                 "--prm-target", "process", "--budgets", "1", "2", "3", "--episodes", "24", "--eval-episodes", "4",
                 "--methods", "helper", "first_k"], experiments=True) == 0
    return out


@pytest.fixture(scope="module")
def calibrated(run_dir):
    helper = run_dir / "helper"
    assert main(["calibrate", "--helper", str(helper), *NAMES, "--episodes", str(N), "--eps", "0.7",
                 "--delta", "0.2"]) == 0
    return helper


def tail(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def test_the_guarantee_is_the_fixed_sequence_choice_of_its_own_rollouts(calibrated):
    record = json.loads((calibrated / GUARANTEE_FILE).read_text())
    table = pd.read_csv(calibrated / "calibration" / "episodes.csv")
    assert record["n"] == N and record["target"] == pytest.approx(0.3)
    assert [m["budget"] for m in record["members"]] == [3, 2, 1, 0]  # most help first
    # Every member played the same episodes.
    ids = [set(table[table["budget"] == c]["episode_id"]) for c in (3, 2, 1, 0)]
    assert all(len(s) == N and s == ids[0] for s in ids)
    assert all(e.startswith("plain_cue-test-2000-") for e in ids[0])
    chosen = None
    for member in record["members"]:
        rows = table[table["budget"] == member["budget"]]
        k = int((rows["success"] >= 1.0).sum())
        assert member["successes"] == k and member["interventions"] == pytest.approx(rows["interventions"].mean())
        assert member["p_value"] == pytest.approx(tail(k, N, 0.3), rel=1e-9)
        assert rows["interventions"].max() <= member["budget"]
        if member["p_value"] > 0.2:
            break
        chosen = member
    assert chosen is not None and record["member"] == chosen
    assert record["helper_fingerprint"] == helper_fingerprint(calibrated)


def test_the_guarantee_round_trips_through_the_gate_and_health(calibrated, tmp_path):
    from fastapi.testclient import TestClient

    from helper.serve.gate_server import ServedGate, create_app

    record = json.loads((calibrated / GUARANTEE_FILE).read_text())
    budget = record["member"]["budget"]
    gate = HelperGate.load(calibrated, budget=budget)
    assert gate.guarantee == record and gate.with_budget(0).guarantee == record
    health = TestClient(create_app(ServedGate(gate), horizon=5)).get("/health").json()["guarantee"]
    assert health["target"] == pytest.approx(0.3) and health["confidence"] == pytest.approx(0.8)
    assert health["budget"] == budget and health["n"] == N and health["applies"] is True
    assert health["data_fingerprint"] == record["data_fingerprint"]
    other = TestClient(create_app(ServedGate(gate.with_budget(budget + 1)), horizon=5)).get("/health").json()
    assert other["guarantee"]["applies"] is False
    # Another helper's files: the guarantee does not carry over.
    moved = tmp_path / "helper"
    shutil.copytree(calibrated, moved)
    config = json.loads((moved / "helper.json").read_text())
    (moved / "helper.json").write_text(json.dumps(config | {"threshold": 0.4}))
    with pytest.warns(UserWarning, match="calibrated on other helper files"):
        assert HelperGate.load(moved, prm=str(calibrated.parent / "prm")).guarantee is None


def test_episodes_the_run_used_are_refused(run_dir, capsys):
    helper = str(run_dir / "helper")
    for where, args in (("solve and distill rows", ["--split", "train", "--seed", "0"]),
                        ("sweep", ["--seed", "1000"]),
                        ("group", ["--split", "train", "--seed", "7"])):
        argv = ["calibrate", "--helper", helper, *NAMES, "--episodes", "8", *args]
        assert main(argv, experiments=gives_experiment_option(argv)) == 2  # --split: an experiment's option
        err = capsys.readouterr().err.strip()
        assert where in err and len(err.splitlines()) == 1


def test_an_unreachable_target_is_refused_with_the_highest_it_can_certify(calibrated, capsys):
    before = (calibrated / GUARANTEE_FILE).read_text()
    assert main(["calibrate", "--helper", str(calibrated), *NAMES, "--episodes", str(N), "--eps", "0.01",
                 "--delta", "0.2"]) == 2
    # One line of its own (the model loader's progress bars also write to stderr).
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("helpgate calibrate:")]
    assert len(err) == 1 and "highest success this calibration can certify is" in err[0]
    err = err[0]
    top = json.loads(before)["members"][0]
    from helper.gates.certify import lower_bound

    assert f"{lower_bound(top['successes'], N, 0.2):.3f}" in err
    assert (calibrated / GUARANTEE_FILE).read_text() == before  # nothing written


def test_the_report_shows_the_certified_budget(calibrated, tmp_path):
    record = json.loads((calibrated / GUARANTEE_FILE).read_text())
    out = tmp_path / "report.md"
    assert main(["report", f"plain-cue={calibrated.parent}", "--out", str(out), "--no-figures", "--resamples", "50"]) == 0
    table = out.read_text().splitlines()
    header = next(line for line in table if line.startswith("| set-up"))
    row = next(line for line in table if line.startswith("| plain-cue"))
    cells = dict(zip([h.strip() for h in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    member = record["member"]
    assert cells["certified"] == (f"0.30 at 80%, n {N}: C={member['budget']}, {member['interventions']:.2f}/ep")


@pytest.fixture(scope="module")
def priced(run_dir):
    """A copy of the run's helper beside it (its recorded PRM and solve folders resolve the same), calibrated on the
    priced family; the family as the helper folder alone gives it, built before any calibration episode."""
    from helper.solve.priced_family import priced_members

    helper = run_dir / "helper-priced"
    shutil.copytree(run_dir / "helper", helper, ignore=shutil.ignore_patterns(GUARANTEE_FILE, "calibration"))
    members, _ = priced_members(helper, 3, 21)
    assert main(["calibrate", "--helper", str(helper), *NAMES, "--episodes", str(N), "--eps", "0.7",
                 "--delta", "0.2", "--family", "priced"]) == 0
    return helper, members


def test_the_priced_guarantee_is_the_fixed_sequence_over_prices(priced):
    from scipy import stats

    helper, members = priced
    record = json.loads((helper / GUARANTEE_FILE).read_text())
    table = pd.read_csv(helper / "calibration" / "episodes.csv")
    assert record["family"] == "priced" and len(members) > 2
    # The order tested is the one the helper folder fixed before the calibration: price 0 (the C = 3 table) up.
    assert [m["price"] for m in record["members"]] == [p for p, _ in members]
    assert all(m["family"] == "priced" and m["budget"] == 3 for m in record["members"])
    ids = [set(table[table["member"] == i]["episode_id"]) for i in range(len(members))]
    assert all(len(s) == N and s == ids[0] for s in ids)
    chosen = None
    for i, member in enumerate(record["members"]):
        rows = table[table["member"] == i]
        k = int((rows["success"] >= 1.0).sum())
        assert member["successes"] == k and member["interventions"] == pytest.approx(rows["interventions"].mean())
        assert member["p_value"] == pytest.approx(tail(k, N, 0.3), rel=1e-9)
        assert member["p_value"] == pytest.approx(stats.binom.sf(k - 1, N, 0.3), rel=1e-12)
        if member["p_value"] > 0.2:
            assert member["tested"] and not member["passed"]
            assert not any(m["tested"] for m in record["members"][i + 1:])
            break
        chosen = member
    assert chosen is not None and record["member"] == chosen


def test_the_certified_priced_gate_replays_its_calibration_and_health_says_so(priced):
    from fastapi.testclient import TestClient

    from helper.commands.calibrate import CalibrateConfig
    from helper.data.environment import EnvSpec, Environment
    from helper.evaluation.play import evaluate_gate
    from helper.solve.priced_family import POLICY_FILE, certified_gate
    from helper.serve.gate_server import ServedGate, create_app

    helper, _ = priced
    record = json.loads((helper / GUARANTEE_FILE).read_text())
    index = record["members"].index(record["member"])
    gate = certified_gate(helper)
    assert gate.price == record["member"]["price"] and gate.budget == 3 and gate.guarantee == record
    # Played again on the calibration episodes, the kept table gives the member's rows exactly.
    env = Environment(CalibrateConfig(spec=EnvSpec(env=NAMES[1], agent=NAMES[3]), episodes=N, seed=2000))
    _, played, _ = evaluate_gate(env, lambda c: gate, [3], "priced", ci_resamples=10)
    rows = pd.read_csv(helper / "calibration" / "episodes.csv").query("member == @index").set_index("episode_id")
    for row in played:
        assert row["success"] == rows.loc[row["episode_id"], "success"]
        assert row["interventions"] == rows.loc[row["episode_id"], "interventions"]
    health = TestClient(create_app(ServedGate(gate), horizon=5)).get("/health").json()["guarantee"]
    assert health["applies"] is True and health["price"] == record["member"]["price"]
    plain = HelperGate.load(helper, budget=3)  # the distilled helper at the same budget is not the certified gate
    assert TestClient(create_app(ServedGate(plain), horizon=5)).get("/health").json()["guarantee"]["applies"] is False
    (helper / POLICY_FILE).write_bytes((helper / POLICY_FILE).read_bytes() + b"\0")
    with pytest.raises(ValueError, match="policy_sha256 differs"):
        certified_gate(helper)
