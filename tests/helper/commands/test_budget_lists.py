"""Budget lists that would be ignored or empty are refused in one line, exit 2: `evaluate --budgets` with no
budget (it wrote empty tables and exited 0), `solve --advice-cost c --budgets ...` (a priced solve has no budget)."""

import pytest
from helper_data import HORIZON, solved, trajectories

from helper.commands.cli import main
from helper.solve.distill import DistillConfig
from helper.solve.distill import run as distill


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("built")
    data = trajectories(root / "data", n=40)
    distill(DistillConfig(labels=str(solved(root / "solve", data, budgets=(1,))), prm="none", out=str(root / "helper")))
    return data, root / "helper"


def one_line(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) <= 1, err
    return code, err


def test_evaluate_with_an_empty_budget_list_is_refused(built, tmp_path, capsys):
    _, helper = built
    code, err = one_line(["evaluate", "--helper", str(helper), "--episodes", "2", "--questions-per-episode",
                          str(HORIZON), "--budgets", "--out", str(tmp_path / "evaluate")], capsys)
    assert code == 2 and "budgets=[]" in err and "--budgets 0 1" in err, err
    assert not (tmp_path / "evaluate").exists()


def test_solve_refuses_budgets_beside_an_advice_cost(built, tmp_path, capsys):
    data, _ = built
    code, err = one_line(["solve", "--data", str(data), "--advice-cost", "0.1", "--budgets", "1", "2", "--bins", "3",
                          "--out", str(tmp_path / "solve")], capsys)
    assert code == 2 and "budgets=[1, 2] with advice_cost=0.1" in err and "drop --budgets or --advice-cost" in err
    assert not (tmp_path / "solve").exists()
    # Either alone is a solve.
    assert one_line(["solve", "--data", str(data), "--advice-cost", "0.1", "--bins", "3", "--out",
                     str(tmp_path / "priced")], capsys)[0] == 0
    assert one_line(["solve", "--data", str(data), "--budgets", "1", "2", "--bins", "3", "--out",
                     str(tmp_path / "capped")], capsys)[0] == 0
