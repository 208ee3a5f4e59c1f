"""`helpgate report` on an AGILE join folder: the helper against PPO's own advice and, at a budget, against
NoveltyGate and random, from constructed evaluations whose answers are known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helper.commands.cli import main
from helper.evaluation.advice_join import join_rows, paired_difference, session_scores, write_manifest

GROUPS = ["blades", "headphones", "tents", "watches"]


def write_sessions(folder: Path, correct, advised) -> Path:
    """One session per (group, index); ``correct`` / ``advised``: functions of (group number, index)."""
    folder.mkdir(parents=True)
    lines = [json.dumps({"group": g, "index": i, "correct": bool(correct(k, i)), "advised": bool(advised(k, i))})
             for k, g in enumerate(GROUPS) for i in range(5)]
    (folder / "sessions.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_total_score_and_paired_difference_by_hand(tmp_path):
    helper = write_sessions(tmp_path / "h", lambda k, i: i < 4, lambda k, i: i == 4)
    ppo = write_sessions(tmp_path / "p", lambda k, i: i < 3 + (k % 2), lambda k, i: True)
    a, b = session_scores(helper, 0.3), session_scores(ppo, 0.3)
    assert a[("tents", "", 0)] == pytest.approx(1.0) and a[("tents", "", 4)] == pytest.approx(-0.3)
    # Per group: helper 4 - 0.3 = 3.7 over 5 sessions; PPO 3 or 4 right, all advised: 3 - 1.5 or 4 - 1.5.
    by_hand = ((3.7 - 1.5) + (3.7 - 2.5)) / 2 / 5
    mean, low, high, n = paired_difference(a, b)
    assert n == 20 and mean == pytest.approx(by_hand)
    # Session differences are 0.3 (i < 3, and i = 3 in odd groups), 1.3 (i = 3 in even groups) or 0 (i = 4, both
    # wrong and advised): every resampled mean lies in [0, 1.3], and the 2.5% quantile above 0.
    assert 0 < low <= mean <= high <= 1.3


def make_join(tmp_path: Path, helper_better: bool, at_ppo_rate: bool = False) -> Path:
    folder = tmp_path / "join-proposal"
    folder.mkdir(parents=True)
    ppo = write_sessions(tmp_path / "ppo", lambda k, i: i < 3, lambda k, i: True)
    if helper_better:
        helper = write_sessions(tmp_path / "helper", lambda k, i: i < 4, lambda k, i: i < 2)
    else:  # the same sessions as PPO's: difference 0 everywhere
        helper = write_sessions(tmp_path / "helper", lambda k, i: i < 3, lambda k, i: True)
    b_helper = write_sessions(tmp_path / "b_helper", lambda k, i: i < 2, lambda k, i: i == 0)
    novelty = write_sessions(tmp_path / "novelty", lambda k, i: i < 1, lambda k, i: i == 4)
    rand = write_sessions(tmp_path / "random", lambda k, i: (i + k) % 3 == 0, lambda k, i: i == 1)
    first = write_sessions(tmp_path / "first", lambda k, i: i < 2, lambda k, i: i < 2)  # AGILE's non-adaptive route
    rule = write_sessions(tmp_path / "rule", lambda k, i: i < 4, lambda k, i: i >= 2)  # asks on 3 of 5, right on 4
    matched = write_sessions(tmp_path / "matched", lambda k, i: i < 3, lambda k, i: i in (0, 4))  # PPO at 2 of 5
    at_rate = {"at_ppo_rate": {"budget": 2, "helper": str(b_helper), "novelty": str(novelty), "random": str(rand),
                               "first": str(first)}} if at_ppo_rate else {}
    write_manifest(folder, {0.5: {"ppo": str(ppo), "helper": str(helper), "rule": str(rule),
                                  "ppo_at_helper_rate": str(matched), "ppo_calls": 284, "helper_calls": 81,
                                  **at_rate}},
                   [{"budget": 2, "cost": 0.3, "helper": str(b_helper), "novelty": str(novelty), "random": str(rand),
                     "first": str(first), "helper_calls": 81}], {"agent": "constrained", "decide_after": "proposal"})
    return folder


def test_rows_and_verdicts(tmp_path):
    rows = join_rows("agile", make_join(tmp_path, helper_better=True), resamples=500)
    assert [(r["setting"], r["baseline"]) for r in rows] == [
        ("c = 0.5", "PPO (own advice)"), ("c = 0.5", "rule: ask unless yes/no-phrased"),
        ("c = 0.5", "PPO at the helper's rate"), ("B = 2, c = 0.3", "novelty"), ("B = 2, c = 0.3", "random"),
        ("B = 2, c = 0.3", "first")]
    assert rows[0]["verdict"] == "win"
    assert rows[0]["training human calls helper / baseline"] == "81 / 284"
    assert rows[0]["advice rate helper / baseline"] == "0.400 / 1.000"
    assert rows[0]["total helper / baseline"] == "0.600 / 0.100"  # 4/5 - 0.5 * 2/5 and 3/5 - 0.5
    # The rule: right on 4 of 5, asking on 3 of them: 4/5 - 0.5 * 3/5 = 0.5 against the helper's 0.6.
    assert rows[1]["total helper / baseline"] == "0.600 / 0.500"
    assert rows[1]["training human calls helper / baseline"] == "81 / 0"
    # PPO at the helper's rate: right on 3 of 5, asking on 2 of them: 3/5 - 0.5 * 2/5 = 0.4, the same rate.
    assert rows[2]["total helper / baseline"] == "0.600 / 0.400"
    assert rows[2]["advice rate helper / baseline"] == "0.400 / 0.400"
    assert rows[2]["training human calls helper / baseline"] == "81 / 284"
    assert rows[3]["verdict"] == "win"  # helper right on 2 of 5 with one advice, novelty on 1 of 5
    # The first two questions advised and right, the rest wrong: 2/5 - 0.3 * 2/5 against 2/5 - 0.3 * 1/5.
    assert rows[5]["total helper / baseline"] == "0.340 / 0.280" and rows[5]["helper − baseline"].startswith("+0.060")
    assert rows[5]["advice rate helper / baseline"] == "0.200 / 0.400"
    same = join_rows("agile", make_join(tmp_path / "tie", helper_better=False), resamples=500)
    assert same[0]["helper − baseline"] == "+0.000 [+0.000, +0.000]" and same[0]["verdict"] == "tie"


def test_the_helper_within_ppos_own_rate_against_ppo_and_the_gates_at_that_rate(tmp_path):
    rows = join_rows("agile", make_join(tmp_path, helper_better=True, at_ppo_rate=True), resamples=500)
    at_rate = [r for r in rows if r["setting"] == "c = 0.5, at PPO's rate"]
    assert [r["baseline"] for r in at_rate] == ["PPO (own advice)", "novelty", "random", "first"]
    # The helper for B = 2: right on 2 of 5, one advised: 2/5 - 0.5 x 1/5 = 0.3; PPO right on 3, all advised: 0.1.
    assert at_rate[0]["total helper / baseline"] == "0.300 / 0.100"
    assert at_rate[0]["training human calls helper / baseline"] == "81 / 284"
    # AGILE's non-adaptive route, its first two advised and right: 2/5 - 0.5 x 2/5 = 0.2, the rest wrong.
    assert at_rate[3]["total helper / baseline"] == "0.300 / 0.200" and at_rate[3]["helper − baseline"].startswith(
        "+0.100")
    assert at_rate[3]["training human calls helper / baseline"] == "81 / 0"
    # Seeds whose PPO asked at other rates pool into one row: the setting names no B.
    second = make_join(tmp_path / "s1", helper_better=True, at_ppo_rate=True)
    pooled = join_rows("agile", [make_join(tmp_path / "s0", helper_better=True, at_ppo_rate=True), second],
                       resamples=200)
    assert {r["seeds"] for r in pooled if r["setting"] == "c = 0.5, at PPO's rate"} == {2}


def test_a_later_run_adds_its_comparisons_and_keeps_the_others(tmp_path):
    folder = make_join(tmp_path, helper_better=True)
    first = json.loads((folder / "join.json").read_text())
    entry = {**first["budgets"][0], "episodes_per_group": 2}
    write_manifest(folder, {}, [entry], {"decide_after": "proposal"})
    after = json.loads((folder / "join.json").read_text())
    assert after["costs"] == first["costs"] and [e.get("episodes_per_group", 1) for e in after["budgets"]] == [1, 2]
    write_manifest(folder, {}, [entry], {"decide_after": "proposal"})  # the same settings again: replaced
    assert len(json.loads((folder / "join.json").read_text())["budgets"]) == 2
    settings = [r["setting"] for r in join_rows("agile", folder, resamples=200)]
    assert settings[-1] == "B = 2, c = 0.3, 2 episodes a group"


def test_report_command_writes_the_agile_table(tmp_path, capsys):
    folder = make_join(tmp_path, helper_better=True)
    out = tmp_path / "agile.md"
    assert main(["report", f"agile={folder}", "--out", str(out), "--resamples", "300"]) == 0
    text = out.read_text()
    assert "| agile | 1 | 20 | c = 0.5 | PPO (own advice) |" in text and "| win |" in text
    assert "decide_after proposal" in text  # the join's own description under the table


def test_a_join_naming_a_missing_evaluation_is_one_line(tmp_path, capsys):
    folder = make_join(tmp_path, helper_better=True)
    manifest = json.loads((folder / "join.json").read_text())
    manifest["costs"]["0.5"]["ppo"] = str(tmp_path / "gone")
    (folder / "join.json").write_text(json.dumps(manifest))
    assert main(["report", str(folder), "--out", str(tmp_path / "r.md")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(tmp_path / "gone" / "sessions.jsonl") in err[0]


def budget_join(folder: Path, helper_right, baseline_right, calls: int, cost: dict | None = None) -> Path:
    """A join with one budget comparison: every route advises the first session of a group."""
    routes = [write_sessions(folder / name, right, lambda k, i: i == 0)
              for name, right in (("helper", helper_right), ("novelty", baseline_right), ("random", baseline_right))]
    join = folder / "join-proposal"
    join.mkdir(parents=True)
    write_manifest(join, cost or {}, [{"budget": 2, "cost": 0.3, "helper": str(routes[0]), "novelty": str(routes[1]),
                                       "random": str(routes[2]), "helper_calls": calls}], {"seed": calls})
    return join


def test_seeds_of_one_set_up_pool_with_seeds_as_the_outer_level(tmp_path):
    # Seed 0: the helper right on every session, the baselines on none (difference 1 each); seed 1: all equal (0).
    ppo = write_sessions(tmp_path / "ppo", lambda k, i: i < 3, lambda k, i: True)
    first = budget_join(tmp_path / "s0", lambda k, i: True, lambda k, i: False, 81,
                        {0.5: {"ppo": str(ppo), "helper": str(ppo), "ppo_calls": 284, "helper_calls": 81}})
    second = budget_join(tmp_path / "s1", lambda k, i: i < 2, lambda k, i: i < 2, 77)
    rows = {(r["setting"], r["baseline"]): r for r in join_rows("agile", [first, second], resamples=2000)}
    assert rows[("c = 0.5", "PPO (own advice)")]["seeds"] == 1  # recorded by seed 0 alone
    pooled = rows[("B = 2, c = 0.3", "random")]
    assert pooled["seeds"] == 2 and pooled["sessions"] == 40
    assert pooled["training human calls helper / baseline"] == "81, 77 / 0"
    # Resampling seeds: both draws seed 1 (mean 0), one each (0.5) or both seed 0 (1), each a quarter or a half
    # of the time: the interval's ends are 0 and 1. Groups alone would keep every resample at 0.5.
    assert pooled["helper − baseline"] == "+0.500 [+0.000, +1.000]" and pooled["verdict"] == "tie"
    out = tmp_path / "pooled.md"
    assert main(["report", f"agile={first}", f"agile={second}", "--out", str(out), "--resamples", "300"]) == 0
    assert "| 2 | 40 | B = 2, c = 0.3 | random | 0.640 / 0.140 |" in out.read_text()
