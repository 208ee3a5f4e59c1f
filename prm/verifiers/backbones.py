"""Which kind of backbone a PRM model name means, and refusing one that cannot be loaded.

Names (``prm train --model``, ``helpgate pipeline --prm-model``):

- a causal LM: ``smollm2`` (embedded), ``tiny`` (tests), ``gemma3-270m`` or a ``.gguf`` file
  (``agile.models``), a Hugging Face id or a local folder: read at
  step tags (``prm.verifiers.model``), frozen or with LoRA adapters;
- ``encoder`` or ``encoder:NAME``: a bidirectional encoder fine-tuned whole as a cross-encoder
  (``prm.verifiers.encoder``). ``NAME`` is ``minilm`` (the embedded all-MiniLM-L6-v2, the default), ``tiny``
  (a random two-layer BERT with MiniLM's tokenizer, for tests) or any local encoder folder / id.

``check_backbone`` runs before any data is read or collected, so a missing folder or a folder
without a tokenizer ends in one line that names the option, not an hour later in the PRM stage.
"""

from __future__ import annotations

from pathlib import Path

from agile.models import GEMMA_LLM

ENCODER = "encoder"
EMBEDDED_ENCODER = "minilm"
TINY_ENCODER = "tiny"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json", "spiece.model",
                   "sentencepiece.bpe.model")
"""Any one of these makes a folder's tokenizer loadable (tokenizer_config.json alone does not)."""


def encoder_name(model: str) -> str | None:
    """``encoder`` -> ``minilm``, ``encoder:X`` -> ``X``; None for a causal-LM name."""
    text = str(model)
    if text == ENCODER:
        return EMBEDDED_ENCODER
    if text.startswith(ENCODER + ":"):
        return text.split(":", 1)[1] or EMBEDDED_ENCODER
    return None


def is_encoder(model: str) -> bool:
    return encoder_name(model) is not None


def _looks_local(name: str) -> bool:
    """A path the user typed as a path (a hub id is ``name`` or ``org/name``, never these)."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or Path(name).exists()


def check_backbone(model: str, option: str) -> None:
    """Refuse, in one ValueError naming ``option``, a local backbone folder that is not there, is not
    a model folder, or has no tokenizer. Embedded names and hub ids pass (their loading errors are
    worded by the loaders)."""
    inner = encoder_name(model)
    name = str(model) if inner is None else inner
    if name in ("smollm2", "embedded", "smollm2-135m-instruct", "tiny", EMBEDDED_ENCODER, GEMMA_LLM):
        return
    if not _looks_local(name):
        return
    path = Path(name).expanduser()
    if not path.exists():
        raise ValueError(f"{option} {model}: {path} is not there; pass a local model folder "
                         f"({'encoder' if inner else 'smollm2'} for the embedded one).")
    if path.is_file() and path.suffix.lower() == ".gguf":
        return  # converted on load (agile.models.gguf_dir)
    if not path.is_dir() or not (path / "config.json").exists():
        raise ValueError(f"{option} {model}: {path} is not a model folder (no config.json); pass a folder "
                         "written by save_pretrained.")
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        raise ValueError(f"{option} {model}: {path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                         "save the tokenizer into the folder too (tokenizer.save_pretrained).")
