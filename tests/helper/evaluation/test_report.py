"""``helpgate report`` on constructed finished sweeps: the verdict, the hierarchical interval, the
CPT flag, provenance under the table and refusals (values worked out by hand in the comments)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from helper.commands.cli import main
from helper.evaluation.report import ReportConfig, run, verdict
from helper.provenance import write_stage

H = 4  # decisions per episode: always intervenes 4 times


def _write_run(folder: Path, outcomes: dict[tuple[str, int], list[float]], used: dict[tuple[str, int], float],
               groups: list[str], env: str = "toy", **config) -> Path:
    """A sweep folder: episodes.csv (one row per method, budget, episode) and summary.json's config."""
    rows = []
    for (method, budget), values in outcomes.items():
        for k, value in enumerate(values):
            rows.append({"method": method, "budget": budget, "episode_id": f"{folder.name}-{k}",
                         "group": groups[k], "success": value, "interventions": used[(method, budget)]})
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "episodes.csv", index=False)
    config = {"env": env, "agent": "simulator", "seed": 1000, "out": str(folder)} | config
    (folder / "summary.json").write_text(json.dumps({"config": config}))
    return folder


def _standard(folder: Path, helper: list[float], rival: list[float], groups=("a", "a", "b", "b"), env="toy",
              **config):
    n = len(helper)
    outcomes = {("never", 0): [0.0] * n, ("always", H): [1.0] * n,
                ("helper", 1): helper, ("helper", 2): helper, ("random", 1): rival, ("random", 2): rival}
    used = {("never", 0): 0.0, ("always", H): float(H), ("helper", 1): 1.0, ("helper", 2): 2.0,
            ("random", 1): 1.0, ("random", 2): 2.0}
    return _write_run(folder, outcomes, used, list(groups), env, **config)


def _row(text: str, baseline: str) -> dict[str, str]:
    """The cells of ``baseline``'s row by column header (the set-up's once-written cells from its first row)."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| set-up |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    at = next(k for k, line in enumerate(lines) if f"| {baseline} |" in line or f"| {baseline} (" in line)
    cells = dict(zip(names, (cell.strip() for cell in lines[at].strip("|").split("|"))))
    first = next(line for line in lines[:at + 1][::-1] if line.startswith("| ") and not line.startswith("|  |")
                 and not line.startswith("| set-up"))
    once = dict(zip(names, (cell.strip() for cell in first.strip("|").split("|"))))
    return cells | {k: once[k] for k in ("set-up", "seeds", "episodes", "comparisons")}


def test_verdict_words():
    assert verdict([(0.01, 0.2), (-0.1, 0.3)]) == "win"
    assert verdict([(-0.2, -0.01), (-0.1, 0.3)]) == "loss"
    assert verdict([(0.01, 0.2), (-0.3, -0.1)]) == "mixed"
    assert verdict([(0.0, 0.2), (-0.1, 0.0)]) == "tie"  # an interval touching 0 holds it


def test_win_loss_and_tie_from_constructed_runs(tmp_path):
    # Helper right on every episode, random wrong on every one: the difference is +1 on every
    # episode, every cluster's mean is +1: interval [1, 1], a win. The reverse: a loss.
    _standard(tmp_path / "w0", [1, 1, 1, 1], [0, 0, 0, 0])
    _standard(tmp_path / "l0", [0, 0, 0, 0], [1, 1, 1, 1])
    # Differences +1, -1 in each group: both groups' means are 0, but the episodes differ: the interval is the
    # episodes' (the floor of metrics.cluster_variance), wide around 0, not a zero-width [0, 0]: a tie.
    _standard(tmp_path / "t0", [1, 0, 1, 0], [0, 1, 0, 1])
    runs = [str(tmp_path / "w0"), f"lossy={tmp_path / 'l0'}", f"even={tmp_path / 't0'}"]
    text = run(ReportConfig(runs=runs, out=str(tmp_path / "r.md"), resamples=500, figures=False))
    win, loss, tie = (r for r in text.splitlines() if "| random |" in r)
    assert "| +1.000 [+1.000, +1.000] | +1.000 [+1.000, +1.000] |" in win and "| win |" in win
    assert "| -1.000 [-1.000, -1.000] |" in loss and "| loss |" in loss
    assert "| +0.000 [-7.336, +7.336] |" in tie and "| tie |" in tie  # t(1) x the sd of +-1 over 4 episodes
    assert win.startswith("| toy (simulator) |") and loss.startswith("| lossy |")  # NAME=RUN names the set-up
    assert (tmp_path / "r.md").read_text() == text


def test_seeds_are_a_level_of_the_interval(tmp_path):
    # Seed 0: the helper beats random on every episode (+1); seed 1: they tie (0). Pooled mean +0.5. Both
    # seeds played groups a and b: a 2 x 2 layout of cell means (1, 1 / 0, 0): MS_seed = 2 (0.25 + 0.25) = 1,
    # MS_group = MS_residual = 0, so Var = 1 / 4 on 1 degree of freedom: +0.5 ± 12.706 * 0.5: a tie. The 8
    # episodes alone would give a narrow interval around 0.5 and call it a win.
    _standard(tmp_path / "s0", [1, 1, 1, 1], [0, 0, 0, 0], seed=1000)
    _standard(tmp_path / "s1", [1, 1, 1, 1], [1, 1, 1, 1], seed=1001)
    text = run(ReportConfig(runs=[str(tmp_path / "s0"), str(tmp_path / "s1")], out=str(tmp_path / "r.md"),
                            resamples=4000, figures=False))
    cells = _row(text, "random")
    assert [cells["seeds"], cells["episodes"]] == ["2", "8"]  # two seeds, eight episodes pooled
    assert cells["C=1"] == "+0.500 [-5.853, +6.853]" and cells["verdict under a cap"] == "tie"


def test_seeds_that_played_the_same_groups_are_crossed_with_them(tmp_path):
    # Two seeds over the same five groups, two episodes each; the helper gains 1 in group a alone, in both seeds.
    # Crossed: cell means 1 in column a, 0 elsewhere: MS_seed = 0, MS_group = 2 (0.8^2 + 4 * 0.2^2) / 4 = 0.4,
    # MS_residual = 0: Var = 0.4 / 10 = 0.04 on 0.4^2 / (0.4^2 / 4) = 4 degrees: 0.2 + 2.776 * 0.2 = 0.755.
    # Other groups in each seed (nested): the seeds are the units, both with mean 0.2, so their spread is 0 and the
    # episodes' own variance of the mean is the floor (var(d) / 20 on 1 degree: 0.2 + 12.706 * 0.0918 = 1.366),
    # where before the floor the interval was [0.2, 0.2].
    def upper(text: str) -> float:
        return float(_row(text, "random")["C=1"].split(",")[1].strip(" ]"))

    for k, groups in enumerate(("abcde", "abcde", "fghij")):
        _standard(tmp_path / f"s{k}", [1, 1] + [0] * 8, [0] * 10, groups=[g for g in groups for _ in (0, 1)],
                  seed=1000 + k)
    crossed = run(ReportConfig(runs=[str(tmp_path / "s0"), str(tmp_path / "s1")], out=str(tmp_path / "r.md"),
                               resamples=8000, figures=False))
    # Other groups in each seed (games drawn per seed): nested, as before.
    nested = run(ReportConfig(runs=[str(tmp_path / "s0"), str(tmp_path / "s2")], out=str(tmp_path / "t.md"),
                              resamples=8000, figures=False))
    assert _row(crossed, "random")["C=1"].startswith("+0.200") and upper(crossed) == 0.755
    assert upper(nested) == 1.366
    # Names that repeat across seeds but hold one episode each (an episode's own id) are not shared units.
    from helper.evaluation.metrics import shares_groups

    assert shares_groups([0, 0, 1, 1], ["a", "a", "a", "a"]) and not shares_groups([0, 0, 1, 1], ["t-0", "t-1"] * 2)


def test_cpt_flagged_in_the_completed_part(tmp_path):
    # The helper's measured points: share 1/4 (1 of always's 4 interventions) with success 0.5,
    # share 1/2 with 0.5. never = 0, always = 1, so PGR 0.5 at both and the curve is completed by
    # a line from (1/2, 0.5) to (1, 1): APGR = 1/4 * 0.25 + 1/4 * 0.5 + 1/2 * 0.75 = 0.5625, half
    # of [0, 1] completed. CPT(50%) = 0.25 (measured); CPT(80%) = 0.5 + 0.3 / 1 * 0.5 = 0.8, in
    # the completed part: flagged. Random: success 0.25 at share 1/4, 0.75 at share 1/2.
    _standard(tmp_path / "c0", [1, 0, 1, 0], [0, 0, 1, 0])
    frame = pd.read_csv(tmp_path / "c0" / "episodes.csv")
    frame.loc[(frame.method == "random") & (frame.budget == 2), "success"] = [1, 1, 1, 0]
    frame.to_csv(tmp_path / "c0" / "episodes.csv", index=False)
    text = run(ReportConfig(runs=[str(tmp_path / "c0")], out=str(tmp_path / "r.md"), resamples=200))
    cells = _row(text, "random")
    assert cells["APGR helper / baseline (completed)"].startswith("0.562 (50%)")
    # Random: (0,0) (1/4,1/4) (1/2,3/4) (1,1): 1/32 + 1/8 + 7/16 = 0.59375; CPT(50%) = 3/8 (measured),
    # CPT(80%) = 0.5 + 0.05 / 0.25 * 0.5 = 0.6 (completed).
    assert cells["APGR helper / baseline (completed)"] == "0.562 (50%) / 0.594 (50%)"
    assert cells["CPT(50%) helper / baseline"] == "0.25 / 0.38" and cells["CPT(80%) helper / baseline"] == "0.80† / 0.60†"
    assert (tmp_path / "r-toy-simulator.png").stat().st_size > 0


def test_provenance_printed_under_the_table(tmp_path):
    folder = _standard(tmp_path / "p0", [1, 1, 1, 1], [0, 1, 0, 1])
    write_stage(folder, "sweep", time.time(), 12.5, ["helpgate", "sweep", "--out", str(folder)])
    text = run(ReportConfig(runs=[str(folder)], out=str(tmp_path / "r.md"), resamples=100, figures=False))
    provenance = text.split("Provenance:")[1]
    assert f"`helpgate sweep --out {folder}`" in provenance and "sweep 12.5 s" in provenance
    assert "cores" in provenance and "commit " in provenance


def test_old_runs_without_groups_are_read_and_said(tmp_path):
    folder = _standard(tmp_path / "o0", [1, 1, 1, 1], [0, 1, 0, 1])
    frame = pd.read_csv(folder / "episodes.csv").drop(columns="group")
    frame.to_csv(folder / "episodes.csv", index=False)
    text = run(ReportConfig(runs=[str(folder)], out=str(tmp_path / "r.md"), resamples=100, figures=False))
    assert "resampled without groups" in text and "no provenance.json" in text


def test_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "r.md")]) == 2
    assert "episodes.csv" in capsys.readouterr().err
    folder = _standard(tmp_path / "g0", [1, 1, 1, 1], [0, 1, 0, 1])
    frame = pd.read_csv(folder / "episodes.csv")
    frame[~((frame.method == "random") & (frame.budget == 2) & (frame.episode_id == "g0-3"))].to_csv(
        folder / "episodes.csv", index=False)
    assert main(["report", str(folder), "--out", str(tmp_path / "r.md")]) == 2
    assert "same episodes" in capsys.readouterr().err
    # Two runs of one name that differ in more than their seed are two set-ups.
    _standard(tmp_path / "d0", [1, 1, 1, 1], [0, 1, 0, 1], decide_after="state")
    _standard(tmp_path / "d1", [1, 1, 1, 1], [0, 1, 0, 1], decide_after="proposal", seed=1001)
    assert main(["report", str(tmp_path / "d0"), str(tmp_path / "d1"), "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert "differ in decide_after (decide_after: 'state' vs 'proposal')" in err and "NAME=RUN" in err
    assert main(["report", str(tmp_path / "d0"), f"proposal={tmp_path / 'd1'}", "--out", str(tmp_path / "r.md"),
                 "--no-figures"]) == 0
    # A dtype stored as auto (before the pipeline resolved it) is unknown: it pools with a named one, not two named.
    _standard(tmp_path / "t0", [1, 1, 1, 1], [0, 1, 0, 1], agent_dtype="auto")
    _standard(tmp_path / "t1", [1, 1, 1, 1], [0, 1, 0, 1], agent_dtype="bfloat16", seed=1001)
    _standard(tmp_path / "t2", [1, 1, 1, 1], [0, 1, 0, 1], agent_dtype="float32", seed=1002)
    assert main(["report", str(tmp_path / "t0"), str(tmp_path / "t1"), "--out", str(tmp_path / "r.md"),
                 "--no-figures"]) == 0
    assert main(["report", str(tmp_path / "t1"), str(tmp_path / "t2"), "--out", str(tmp_path / "r.md")]) == 2
    assert "differ in agent_dtype (agent_dtype: 'bfloat16' vs 'float32')" in capsys.readouterr().err



def test_one_run_without_out_is_reported_inside_it(tmp_path, monkeypatch):
    folder = _standard(tmp_path / "only", [1, 1, 1, 1], [0, 1, 0, 1])
    monkeypatch.chdir(tmp_path)
    run(ReportConfig(runs=[str(folder)], resamples=100, figures=False))
    assert (folder / "report.md").is_file() and not (tmp_path / "report.md").exists()

def test_drop_incomplete_leaves_out_what_a_seed_did_not_play_and_names_it(tmp_path):
    # Seed 0 also swept C=3 and a method ("router") seed 1's sweep skipped; pooled, both go, named under the
    # table, and the cells that every seed played are the ones without them (seed 0 +1, seed 1 +1: +1).
    s0 = _standard(tmp_path / "s0", [1, 1, 1, 1], [0, 0, 0, 0])
    s1 = _standard(tmp_path / "s1", [1, 1, 1, 1], [0, 0, 0, 0], seed=1001)
    frame = pd.read_csv(s0 / "episodes.csv")
    extra = frame[(frame.method == "random") & (frame.budget == 2)]
    pd.concat([frame, extra.assign(budget=3), extra.assign(method="router", budget=1)]).to_csv(
        s0 / "episodes.csv", index=False)
    summary = json.loads((s0 / "summary.json").read_text())  # seed 0's sweep was asked for one method more
    summary.setdefault("config", {})["methods"] = [*summary["config"].get("methods", []), "router"]
    (s0 / "summary.json").write_text(json.dumps(summary))
    runs = [str(s0), str(s1)]
    assert main(["report", *runs, "--out", str(tmp_path / "r.md"), "--no-figures"]) == 2  # refused by default
    text = run(ReportConfig(runs=runs, out=str(tmp_path / "r.md"), resamples=200, figures=False,
                            drop_incomplete=True))
    assert f"random at C=3 (not played by {s1})" in text and f"router at C=1 (not played by {s1})" in text
    assert "| router |" not in text
    assert [_row(text, "random")[f"C={c}"] for c in (1, 2)] == ["+1.000 [+1.000, +1.000]", "+1.000 [+1.000, +1.000]"]



def test_a_no_cap_level_one_seed_played_past_the_others_is_left_out_without_asking(tmp_path):
    # Seed 0's threshold curve went one level further (its priced helper spent more): pooled, that level goes,
    # named, with no --drop-incomplete; a capped cell only one seed played is still refused.
    s0 = _standard(tmp_path / "s0", [1, 1, 1, 1], [0, 0, 0, 0])
    s1 = _standard(tmp_path / "s1", [1, 1, 1, 1], [0, 0, 0, 0], seed=1001)
    frame = pd.read_csv(s0 / "episodes.csv")
    extra = frame[(frame.method == "random") & (frame.budget == 2)]
    pd.concat([frame, extra.assign(method="prm_threshold_nocap", budget=4)]).to_csv(s0 / "episodes.csv", index=False)
    text = run(ReportConfig(runs=[str(s0), str(s1)], out=str(tmp_path / "r.md"), resamples=200, figures=False))
    assert f"prm_threshold_nocap at C=4 (not played by {s1})" in text
    pd.concat([frame, extra.assign(budget=3)]).to_csv(s0 / "episodes.csv", index=False)
    with pytest.raises(ValueError, match="random at C=3 did not play every episode"):
        run(ReportConfig(runs=[str(s0), str(s1)], out=str(tmp_path / "r.md"), resamples=200, figures=False))

# -- the verdict's family, spend beside success, baselines apart -------------------------------------------
def test_holm_is_the_step_down_rule_by_brute_force():
    import itertools

    import numpy as np

    from helper.evaluation.metrics import bootstrap_p, holm

    rng = np.random.default_rng(0)
    for _ in range(300):
        p = rng.choice([0.001, 0.01, 0.0125, 0.02, 0.03, 0.04, 0.06, 0.5], size=rng.integers(1, 6)).tolist()
        # Holm by its closed-testing reading: H_i is rejected iff every intersection containing it has its
        # smallest p-value at most alpha / (size of the intersection) (Bonferroni local tests).
        m = len(p)
        expected = [all(min(p[j] for j in subset) <= 0.05 / len(subset)
                        for r in range(1, m + 1) for subset in itertools.combinations(range(m), r) if i in subset)
                    for i in range(m)]
        assert holm(p, 0.05) == expected, p
    assert bootstrap_p([0.1, 0.2, -0.1, 0.3]) == 0.5 and bootstrap_p([0.1, 0.2]) == 0.0
    assert verdict([(0.01, 0.2), (0.02, 0.3)], [False, False]) == "tie"
    assert verdict([(0.01, 0.2), (-0.3, -0.1)], [False, True]) == "loss"


def _marginal(folder: Path, baselines: tuple[str, ...]) -> Path:
    """20 episodes, each its own group: every baseline fails on 7 that the helper wins and succeeds on the rest,
    where the helper loses one: difference +0.30, 95% interval about [+0.05, +0.55], bootstrap p about 0.027."""
    helper = [1.0] * 20
    rival = [0.0] * 7 + [1.0] * 13
    rival_helper = helper.copy()
    rival_helper[-1] = 0.0
    outcomes = {("never", 0): [0.0] * 20, ("always", H): [1.0] * 20}
    used = {("never", 0): 0.0, ("always", H): float(H)}
    for c in (1, 2):
        outcomes[("helper", c)], used[("helper", c)] = rival_helper, float(c)
        for b in baselines:
            outcomes[(b, c)], used[(b, c)] = rival, float(c)
    return _write_run(folder, outcomes, used, [f"g{k}" for k in range(20)])


def test_holm_over_the_family_decides_the_win(tmp_path):
    alone = run(ReportConfig([str(_marginal(tmp_path / "one", ("random",)))], out=str(tmp_path / "a.md"),
                             budgets=[1], resamples=4000, figures=False))
    cells = _row(alone, "random")
    assert cells["comparisons"] == "1 + 0" and cells["verdict under a cap"] == "win"
    low = float(cells["C=1"].split("[")[1].split(",")[0])
    assert low > 0
    # Four comparisons (two baselines, two budgets), each interval still above 0: Holm's first step asks
    # p <= 0.05 / 4, which p about 0.027 is not.
    four = run(ReportConfig([str(_marginal(tmp_path / "two", ("random", "router")))], out=str(tmp_path / "b.md"),
                            resamples=4000, figures=False))
    for baseline in ("random", "router"):
        cells = _row(four, baseline)
        assert cells["comparisons"] == "4 + 0" and cells["verdict under a cap"] == "tie"
        assert float(cells["C=1"].split("[")[1].split(",")[0]) > 0
    assert "Holm's rule at 5%" in four


def test_the_priced_helper_is_read_at_its_own_spend_on_each_no_cap_curve(tmp_path):
    """Hand-computed curves. The priced helper spends 1.0 at s=1 and 2.0 at s=2 (no cap). prm_threshold's no-cap
    curve spends 0.5 and 1.5 at levels 1 and 2 (under-spends at s=1): read at 1.0, half of each per episode. router's
    spends 2.0 at level 1 (over-spends): read at 1.0 between never (0) and level 1. knn's stops at 0.5: out of reach
    at both. Under the cap the same baselines are compared at C=c as before, in a family of their own."""
    outcomes = {("never", 0): [0.0] * 4, ("always", H): [1.0] * 4, ("helper", 1): [1, 1, 1, 0],
                ("helper", 2): [1, 1, 1, 1], ("helper_priced", 1): [1, 1, 1, 0], ("helper_priced", 2): [1, 1, 1, 1],
                ("prm_threshold", 1): [0, 0, 1, 0], ("prm_threshold", 2): [1, 1, 1, 0],
                ("prm_threshold_nocap", 1): [0, 0, 1, 0], ("prm_threshold_nocap", 2): [1, 1, 1, 0],
                ("router", 1): [1, 0, 1, 0], ("router", 2): [1, 1, 1, 0], ("router_nocap", 1): [1, 1, 1, 1],
                ("knn", 1): [0, 0, 0, 0], ("knn", 2): [0, 0, 0, 0], ("knn_nocap", 1): [0, 0, 0, 0]}
    used = {("never", 0): 0.0, ("always", H): float(H), ("helper", 1): 1.0, ("helper", 2): 2.0,
            ("helper_priced", 1): 1.0, ("helper_priced", 2): 2.0, ("prm_threshold", 1): 0.5,
            ("prm_threshold", 2): 1.5, ("prm_threshold_nocap", 1): 0.5, ("prm_threshold_nocap", 2): 1.5,
            ("router", 1): 1.0, ("router", 2): 2.0, ("router_nocap", 1): 2.0, ("knn", 1): 0.5, ("knn", 2): 0.5,
            ("knn_nocap", 1): 0.5}
    folder = _write_run(tmp_path / "s", outcomes, used, ["a", "a", "b", "b"])
    text = run(ReportConfig([str(folder)], out=str(tmp_path / "r.md"), figures=False))
    assert "| helper_priced |" not in text and "| prm_threshold_nocap |" not in text  # sides, not baselines
    cells = _row(text, "prm_threshold")
    assert cells["interventions C=1 helper / baseline"] == "1.00 / 0.50" and cells["C=1"].startswith("+0.500")
    # Half level 1, half level 2 per episode: (0 + 1) / 2 on episodes 0-1, 1 on 2, 0 on 3: 0.5; priced 0.75: +0.250.
    assert cells["s=1 priced helper at its spend"].startswith("+0.250 [")
    assert "(1.00/ep; 0.50·s=1 + 0.50·s=2)" in cells["s=1 priced helper at its spend"]
    assert cells["s=2 priced helper at its spend"] == "out of reach (priced 2.00/ep, curve ≤ 1.50)"
    # Never and level 1 half each: (0 + 1) / 2 on every episode: 0.5; priced 0.75: +0.250.
    router = _row(text, "router")["s=1 priced helper at its spend"]
    assert router.startswith("+0.250 [") and "0.50·s=0 + 0.50·s=1" in router
    assert _row(text, "knn")["s=1 priced helper at its spend"].startswith("out of reach")
    # Under a cap: three baselines at two budgets; at a spend: the readings that exist (prm_threshold at s=1, router at
    # s=1 and at s=2, where its level 1 spends exactly the priced helper's 2.0).
    assert _row(text, "knn")["comparisons"] == "6 + 3"


def test_online_rl_equal_to_first_k_and_the_helpers_variant_stand_apart(tmp_path):
    outcomes = {("never", 0): [0.0] * 4, ("always", H): [1.0] * 4}
    used = {("never", 0): 0.0, ("always", H): float(H)}
    for c in (1, 2):
        for method, values in (("helper", [1, 1, 1, 1]), ("first_k", [0, 1, 0, 0]), ("online_rl", [0, 1, 0, 0]),
                               ("helper_priced", [1, 1, 0, 1]), ("random", [0, 0, 0, 0])):
            outcomes[(method, c)], used[(method, c)] = values, float(c)
    text = run(ReportConfig([str(_write_run(tmp_path / "s", outcomes, used, ["a", "b", "c", "d"]))],
                            out=str(tmp_path / "r.md"), figures=False))
    assert _row(text, "online_rl (= first_k on every episode)")["verdict under a cap"] == "not in the family"
    assert _row(text, "first_k")["comparisons"] == "4 + 0"  # first_k and random at C = 1 and 2
    # Once online_rl differs from first_k on one episode it is a baseline of its own.
    outcomes[("online_rl", 2)] = [1, 1, 0, 0]
    text = run(ReportConfig([str(_write_run(tmp_path / "t", outcomes, used, ["a", "b", "c", "d"]))],
                            out=str(tmp_path / "r2.md"), figures=False))
    assert "| online_rl |" in text and _row(text, "first_k")["comparisons"] == "6 + 0"


def test_the_cluster_t_interval_is_the_t_interval_of_the_cluster_means_where_groups_are_nested():
    import numpy as np
    from scipy import stats

    from helper.evaluation.metrics import cluster_t_interval, cluster_t_p

    rng = np.random.default_rng(3)
    # Groups that differ (a group effect of sd 2 against episodes of sd 1): the cluster means' variance is above
    # the episodes' own, the floor of metrics.cluster_variance (tested in test_metrics), so the formula shows.
    values = rng.normal(0.1, 1.0, 12) + np.repeat(rng.normal(0.0, 2.0, 4), 3)
    groups = [g for g in "abcd" for _ in range(3)]
    assert np.var(values.reshape(4, 3).mean(axis=1), ddof=1) / 4 > np.var(values, ddof=1) / 12
    means = values.reshape(4, 3).mean(axis=1)
    expected = stats.t.interval(0.95, 3, loc=means.mean(), scale=means.std(ddof=1) / 2)
    assert np.allclose(cluster_t_interval(values, [[0] * 12, groups]), expected)
    assert np.isclose(cluster_t_p(values, [[0] * 12, groups]), stats.ttest_1samp(means, 0).pvalue)
    # Several seeds, each with groups of its own: the seeds are the clusters.
    seeds = [0] * 6 + [1] * 6
    scale = max(abs(values[:6].mean() - values[6:].mean()) / 2, values.std(ddof=1) / np.sqrt(12))  # the floor
    assert np.allclose(cluster_t_interval(values, [seeds, groups]),
                       stats.t.interval(0.95, 1, loc=values.mean(), scale=scale))
