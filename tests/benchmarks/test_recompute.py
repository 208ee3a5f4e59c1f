"""benchmarks/recompute.py: every published table names only committed files, its kept output is what the committed
command prints now, RESULTS.md cites it, and a table that reads a run folder is refused in one line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("benchmark_recompute", REPO / "benchmarks" / "recompute.py")
recompute = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = recompute  # dataclasses look their module up there
_spec.loader.exec_module(recompute)

TABLES = recompute.load()
# One table of each kind (a kept run's out-of-fold rows; kept per-episode outcomes with an exact computation): the
# suite's time is bounded; `python benchmarks/recompute.py --check` reruns every one.
QUICK = ["auroc-arith", "rapids-words-expected"]


def test_every_table_reads_the_repository_only_and_is_cited():
    results = (REPO / "benchmarks" / "RESULTS.md").read_text()
    assert len({t.name for t in TABLES}) == len(TABLES)
    for table in TABLES:
        assert table.paths(), table.name
        assert recompute.unreadable(table) == [], table.name
        assert (REPO / table.output).is_file(), table.output
        assert str(table.output) in results, f"RESULTS.md does not cite {table.output}"


def test_the_quick_tables_recompute_byte_equal(capsys):
    assert set(QUICK) <= {t.name for t in TABLES}
    assert recompute.main(["--check", "--only", *QUICK]) == 0
    assert capsys.readouterr().out.count(": same (") == len(QUICK)


def test_a_changed_number_is_named(tmp_path, capsys):
    table = next(t for t in TABLES if t.name in QUICK)
    kept = tmp_path / "kept.txt"
    kept.write_text((REPO / table.output).read_text().replace("0.", "1.", 1))
    manifest = tmp_path / "published.toml"
    manifest.write_text(f'[[table]]\nname = "t"\ncommand = "{table.command}"\noutput = "{kept}"\n')
    assert recompute.main(["--check", "--manifest", str(manifest)]) == 1
    out = capsys.readouterr().out
    assert "t: MOVED" in out and "1 table(s) differ" in out and "+" in out


def test_a_table_reading_a_run_folder_is_refused(tmp_path):
    manifest = tmp_path / "published.toml"
    manifest.write_text('[[table]]\nname = "local"\ncommand = "python benchmarks/setups/auroc_intervals.py '
                        'runs/main-cf-3"\noutput = "benchmarks/published/x.txt"\n')
    with pytest.raises(SystemExit) as refused:
        recompute.main(["--manifest", str(manifest)])
    message = str(refused.value)
    assert "'local' reads runs/main-cf-3" in message and "benchmarks/data/" in message and "\n" not in message
