"""A pipeline run again on its folder: finished stages made with other settings are refused, not reused."""

import json

import pytest

from helper.commands.pipeline import PipelineConfig
from helper.commands.resume import STAGES, stale_stage
from helper.stored_config import config_of, flat


def folder(tmp_path, finished, **stored):
    out = tmp_path / "run"
    out.mkdir()
    (out / "pipeline.json").write_text(json.dumps(flat(config_of(PipelineConfig, out=str(out), **stored))))
    for stage in finished:
        (out / stage).mkdir()
        (out / stage / ".done").write_text("{}")
    return out


def now(out, **changes):
    return config_of(PipelineConfig, out=str(out), **changes)


def test_a_new_folder_and_the_same_settings_resume(tmp_path):
    assert stale_stage(tmp_path / "new", now(tmp_path / "new")) is None
    out = folder(tmp_path, STAGES, bins=6)
    assert stale_stage(out, now(out, bins=6)) is None
    assert stale_stage(out, now(out, bins=6, device="cuda", redo=True)) is None  # where it runs changes nothing


@pytest.mark.parametrize("changes, stage, flag", [
    ({"bins": 8}, "solve", "--bins"),
    ({"solve_pessimism": 1.0}, "solve", "--solve-pessimism"),
    ({"seed": 1}, "collect", "--seed"),
    ({"prm_model": "tiny"}, "prm", "--prm-model"),
    ({"methods": ["helper"]}, "sweep", "--methods"),
    ({"agent": "simulator"}, "collect", "--agent"),  # a field of the nested environment spec
])
def test_a_finished_stage_with_other_settings_is_refused_naming_both_values(tmp_path, changes, stage, flag):
    out = folder(tmp_path, STAGES)
    line = stale_stage(out, now(out, **changes))
    assert line and f"stage {stage} finished with {flag} " in line and repr(next(iter(changes.values()))) in line
    assert "\n" not in line and "--redo" in line


def test_a_setting_whose_first_stage_has_not_finished_is_allowed(tmp_path):
    out = folder(tmp_path, ("collect", "prm", "score"))
    assert stale_stage(out, now(out, bins=8, methods=["helper"], backend="text")) is None
    assert "stage prm finished with --prm-folds None" in stale_stage(out, now(out, prm_folds=3))


def test_a_folder_written_before_a_setting_existed_reads_with_the_value_it_had(tmp_path):
    out = folder(tmp_path, STAGES)
    stored = json.loads((out / "pipeline.json").read_text())
    del stored["solve_pessimism"], stored["prm_proposal_features"]
    (out / "pipeline.json").write_text(json.dumps(stored))
    assert stale_stage(out, now(out)) is None
    assert "--solve-pessimism 0.0" in stale_stage(out, now(out, solve_pessimism=0.5))


def test_an_unreadable_pipeline_json_is_named(tmp_path):
    out = folder(tmp_path, STAGES)
    (out / "pipeline.json").write_text("{not json")
    assert str(out / "pipeline.json") in stale_stage(out, now(out))


def test_auto_is_stored_as_what_it_loaded_so_a_resume_on_another_kind_of_machine_is_refused(tmp_path, monkeypatch):
    from dataclasses import replace

    import agile.models
    from helper.data.environment import EnvSpec

    cpu = EnvSpec(agent="smollm2", device="cpu")
    monkeypatch.setattr(agile.models, "native_bf16", lambda: True)
    assert cpu.resolved_dtype() == "bfloat16"  # a CPU with native BF16 runs the agent in bf16
    monkeypatch.setattr(agile.models, "native_bf16", lambda: False)
    assert cpu.resolved_dtype() == "float32"
    assert EnvSpec(agent="smollm2", device="cuda").resolved_dtype() == "bfloat16"  # no GPU needed to name it
    assert replace(cpu, agent_dtype="bfloat16").resolved_dtype() == "bfloat16"
    assert EnvSpec(agent="simulator").resolved_dtype() == "auto"  # no weights of ours: nothing to resolve
    out = folder(tmp_path, STAGES, agent_dtype="bfloat16")  # collected on a GPU under auto
    line = stale_stage(out, now(out, agent_dtype=cpu.resolved_dtype()))
    assert "stage collect finished with --agent-dtype 'bfloat16'" in line and "'float32'" in line
    assert stale_stage(out, now(out, agent_dtype="bfloat16")) is None


def test_a_folder_stored_before_auto_was_resolved_resumes_with_either_dtype(tmp_path):
    out = folder(tmp_path, STAGES, agent_dtype="auto")
    assert stale_stage(out, now(out, agent_dtype="float32")) is None
    assert stale_stage(out, now(out, agent_dtype="bfloat16")) is None
