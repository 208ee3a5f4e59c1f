"""``helpgate report --headline``: the headline table from a source of set-ups, on a tiny real pipeline run (its
report rewritten from the run, then read back once the run is gone), beside an older report; and RESULTS' headline
block is exactly what the committed source gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helper.commands.cli import main
from helper.evaluation.headline import BEGIN, CURRENT, END, OLDER, block, table_rows
from helper.evaluation.report import headline_block

REPO = Path(__file__).resolve().parents[3]
OLD_REPORT = """| set-up | seeds | episodes | baseline | C=1 | C=2 | verdict |
|---|---|---|---|---|---|---|
| old | 3 | 24 | random | +0.042 [-0.052, +0.115] | +0.021 [-0.094, +0.135] | tie |
|  |  |  | router | +0.062 [+0.010, +0.177] | +0.062 [-0.115, +0.260] | win |

Cells C=c: the old notes.
"""


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory, one_torch_thread):
    """A real `helpgate pipeline` folder (the arithmetic-chain plug-in, a tiny PRM): provenance and all."""
    root = tmp_path_factory.mktemp("headline")
    args = ["pipeline", "--out", str(root / "runs" / "chain0"), "--quick", "--env", "examples.arith_chain:make_episodes",
            "--agent", "examples.arith_chain:make_agent", "--prm-model", "tiny", "--episodes", "24",
            "--eval-episodes", "6", "--budgets", "1", "2"]
    assert main(args) == 0
    return root


def _source(root: Path) -> Path:
    (root / "reports").mkdir(exist_ok=True)
    (root / "reports" / "old.md").write_text(OLD_REPORT)
    source = root / "config" / "headline.toml"
    source.parent.mkdir(exist_ok=True)
    source.write_text('root = ".."\n\n[[setup]]\nname = "chain"\nreport = "reports/chain.md"\nruns = ["runs/chain0"]\n'
                      'after = ["python pool.py runs/chain0"]\n\n'
                      '[[setup]]\nname = "old one"\nreport = "reports/old.md"\nruns = ["runs/gone0"]\n'
                      'commit = "abc1234"\nmachine = "2-core CPU"\ncommand = "helpgate pipeline --seed S"\n')
    return source


def _rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    _, rows = table_rows(text, "headline")
    return {(row["set-up"], row["baseline"]): row for row in rows}


def test_headline_from_a_real_run_then_from_its_committed_report(chain_run, tmp_path):
    root = chain_run
    source = _source(root)
    results = tmp_path / "RESULTS.md"
    results.write_text(f"# Results\n\nopening\n\n{BEGIN}\nstale table\n{END}\n\n## Set-ups\n\nkept\n")
    assert main(["report", "--headline", str(source), "--out", str(results), "--resamples", "200"]) == 0
    written = results.read_text()
    # Only the block changed: the text around it is as it was.
    assert written.startswith("# Results\n\nopening\n\n" + BEGIN) and written.endswith(f"{END}\n\n## Set-ups\n\nkept\n")
    assert "stale table" not in written and written.count(BEGIN) == 1
    # The set-up's report was rewritten from its run, as `helpgate report chain=RUN` writes it from the root.
    report = (root / "reports" / "chain.md").read_text()
    direct = tmp_path / "direct.md"
    assert main(["report", f"chain={root / 'runs' / 'chain0'}", "--out", str(direct), "--resamples", "200",
                 "--no-figures"]) == 0
    assert table_rows(report, "r")[1] == table_rows(direct.read_text(), "d")[1]
    assert "- `runs/chain0` (chain)" in report  # the source's spelling of the run, not this machine's path
    # Each row: the report's cells, the run's commit, machine and command from its provenance.json.
    rows = _rows(written)
    _, reported = table_rows(report, "r")
    stages = json.loads((root / "runs" / "chain0" / "provenance.json").read_text())["stages"]
    for row in reported:
        mine = rows[("chain", row["baseline"])]
        for column in ("C=1", "C=2", "interventions C=1 helper / baseline", "s=2 priced helper at its spend",
                       "verdict under a cap", "verdict at a spend", "comparisons", "episodes"):
            assert mine[column] == row[column], column
        assert mine["rules"] == CURRENT
        assert mine["commit"] == stages["pipeline"]["commit"]["describe"]
        assert mine["command"] == (f"`helpgate pipeline --out {root / 'runs' / 'chain0'} --quick --env "
                                   "examples.arith_chain:make_episodes --agent examples.arith_chain:make_agent "
                                   "--prm-model tiny --episodes 24 --eval-episodes 6 --budgets 1 2`, then "
                                   "`python pool.py runs/chain0`")
        assert f"of {stages['pipeline']['machine']['cores']} cores" in mine["machine"]
    # The older report: its own cells, the source's commit, machine and command, marked older, no spend columns.
    old = rows[("old one", "router")]
    assert (old["rules"], old["verdict under a cap"], old["C=1"]) == (OLDER, "win", "+0.062 [+0.010, +0.177]")
    assert old["verdict at a spend"] == "–"
    assert (old["comparisons"], old["interventions C=2 helper / baseline"]) == ("–", "–")
    assert (old["commit"], old["machine"], old["command"]) == ("abc1234", "2-core CPU", "`helpgate pipeline --seed S`")
    assert f"Rules '{OLDER}' (1 set-ups)" in written
    # Run again, the file is unchanged; with the run gone, the committed report gives the same block.
    assert main(["report", "--headline", str(source), "--out", str(results), "--resamples", "200"]) == 0
    assert results.read_text() == written
    moved = root.parent / (root.name + "-gone")
    shutil.copytree(root, moved, ignore=shutil.ignore_patterns("runs"))
    assert headline_block(moved / "config" / "headline.toml", resamples=200) == block(written)


def test_bad_sources_are_one_line_and_exit_2(tmp_path, capsys):
    source = tmp_path / "h.toml"
    source.write_text('[[setup]]\nname = "x"\nreport = "r.md"\nrun = ["a"]\n')
    assert main(["report", "--headline", str(source), "--out", str(tmp_path / "o.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key(s) ['run']" in err
    source.write_text('[[setup]]\nname = "x"\nreport = "r.md"\nbudgets = "1 2"\n')
    assert main(["report", "--headline", str(source), "--out", str(tmp_path / "o.md")]) == 2
    assert "setup 1 (x): budgets = '1 2' is not a list of int" in capsys.readouterr().err
    source.write_text('[[setup]]\nname = "x"\nreport = "r.md"\nruns = ["a"]\n')
    assert main(["report", "--headline", str(source), "--out", str(tmp_path / "o.md")]) == 2
    err = capsys.readouterr().err
    assert "no committed report" in err and "['a'] not on disk" in err
    assert main(["report", "--headline", str(tmp_path / "none.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--headline", str(source)]) == 2
    assert "not both" in capsys.readouterr().err
    # A file with text and no headline markers is never overwritten.
    chain = tmp_path / "r.md"
    chain.write_text(OLD_REPORT)
    source.write_text('[[setup]]\nname = "x"\nreport = "r.md"\n')
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nno markers here\n")
    assert main(["report", "--headline", str(source), "--out", str(results)]) == 2
    assert "no headline block" in capsys.readouterr().err and results.read_text() == "# Results\n\nno markers here\n"


def test_results_headline_is_the_generated_block():
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    # Read from the committed reports alone (no run folder needed): what a fresh clone regenerates.
    assert block(text) == headline_block(REPO / "benchmarks" / "headline.toml", refresh=False), (
        "RESULTS.md's headline block differs from its source: run "
        "`helpgate report --headline benchmarks/headline.toml --out benchmarks/RESULTS.md`")


def test_every_headline_row_is_recomputed_from_committed_episodes():
    """Each headline set-up's runs are committed (benchmarks/data/): the block regenerated from them equals RESULTS',
    and one cell's point estimate, recomputed here from the committed per-episode rows with nothing of the report's
    code, is the number RESULTS prints."""
    import tomllib

    import pandas as pd

    source = REPO / "benchmarks" / "headline.toml"
    setups = tomllib.loads(source.read_text())["setup"]
    for setup in setups:
        assert all((REPO / run / "sweep" / "episodes.csv").is_file() for run in setup["runs"]), setup["name"]
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    assert block(text) == headline_block(source, refresh=True), (
        "RESULTS.md's headline differs from the committed runs: run "
        "`helpgate report --headline benchmarks/headline.toml --out benchmarks/RESULTS.md`")
    first = setups[0]
    frames = [pd.read_csv(REPO / run / "sweep" / "episodes.csv") for run in first["runs"]]
    diffs = []
    for seed, frame in enumerate(frames):
        at = frame[frame["budget"] == 1].set_index(["method", "episode_id"])["success"]
        diffs.append((at["helper"] - at["prm_threshold"]).to_numpy())
    expected = float(pd.Series([d for part in diffs for d in part]).mean())
    rows = _rows(text)
    cell = rows[(first["name"], "prm_threshold")]["C=1"]
    assert float(cell.split()[0]) == pytest.approx(expected, abs=5e-4), (cell, expected)
