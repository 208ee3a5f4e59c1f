"""``benchmarks/trust/run_hashes.py``: two runs of the same settings compare equal, whatever records when or where
they ran, and a changed value is still found."""

from __future__ import annotations

import json

from imports import benchmark_module

run_hashes = benchmark_module("run_hashes")


def _run(folder, seconds: float, digest: str, success: float) -> None:
    (folder / "helper").mkdir(parents=True)
    (folder / "sweep").mkdir()
    (folder / "helper" / "helper.json").write_text(json.dumps({
        "classifier_files": {"classifier/model.skops": f"sha256:{digest}"}, "labels_from_absolute": str(folder),
        "threshold": 0.5}))
    (folder / "sweep" / "summary.json").write_text(json.dumps({"method_seconds": {"helper": seconds},
                                                               "success": success}))
    (folder / "sweep" / ".done").write_text(json.dumps({"seconds": seconds}))


def test_what_a_run_records_of_its_time_and_place_is_set_aside_and_a_value_is_not(tmp_path):
    _run(tmp_path / "a", 10.0, "0" * 64, 0.5)
    _run(tmp_path / "b", 12.5, "1" * 64, 0.5)
    assert run_hashes.run_digests(tmp_path / "a") == run_hashes.run_digests(tmp_path / "b")
    assert run_hashes.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    _run(tmp_path / "c", 10.0, "0" * 64, 0.75)
    assert run_hashes.main([str(tmp_path / "a"), str(tmp_path / "c")]) == 1
