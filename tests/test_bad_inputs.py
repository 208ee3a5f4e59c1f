"""Bad inputs end in one line naming what is wrong and exit code 2, never a traceback
(benchmarks/bad_inputs.py makes the full table)."""

from __future__ import annotations

import json

import pytest

from agile.envs.catalog_generator import default_catalog_dir
from helper.cli import main
from prm.model import ProcessRewardModel
from prm.synthetic import synthetic_frame


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines()
             if line.strip() and "%|" not in line and "Loading weights" not in line]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


def test_collect_values_out_of_range(tmp_path, capsys):
    catalog = str(default_catalog_dir(seed=0))
    assert main(["collect", "--data", catalog, "--explore-p", "1.5", "--out", str(tmp_path / "a")]) == 2
    assert "explore_p" in one_error_line(capsys)
    assert main(["collect", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "b")]) == 2
    assert str(tmp_path / "nowhere") in one_error_line(capsys)


def test_prm_folder_of_another_backbone(tmp_path, capsys):
    prm = ProcessRewardModel.create("tiny", head="value")
    folder = prm.save(tmp_path / "prm")
    settings = json.loads((folder / "prm_config.json").read_text())
    settings["hidden_size"] = settings["hidden_size"] * 2  # a head made for a wider backbone
    (folder / "prm_config.json").write_text(json.dumps(settings))
    (tmp_path / "data").mkdir()
    synthetic_frame(episodes=2, seed=0).write_parquet(tmp_path / "data" / "part-0.parquet")
    assert main(["prm", "score", "--data", str(tmp_path / "data"), "--model", str(folder),
                 "--out", str(tmp_path / "scored"), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("helpgate prm score: error: ") and "another backbone" in line
    with pytest.raises(ValueError, match="another backbone"):
        main(["prm", "score", "--data", str(tmp_path / "data"), "--model", str(folder),
              "--out", str(tmp_path / "scored"), "--no-progress", "--debug"])


def test_corrupt_sft_data_names_file_and_line(tmp_path, capsys):
    data = tmp_path / "sft.jsonl"
    data.write_text('{"input_ids": [1, 2], "action_mask": [0, 1]}\n{"input_ids": [1, 2\n')
    assert main(["agile", "sft", "--model", "tiny", "--data-file", str(data), "--device", "cpu",
                 "--out-dir", str(tmp_path / "sft"), "--no-save"]) == 2
    assert f"{data}:2: not a JSON line" in one_error_line(capsys)
