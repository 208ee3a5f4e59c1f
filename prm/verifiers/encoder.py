"""A cross-encoder PRM: a small bidirectional encoder fine-tuned whole, one window per step.

    helpgate prm train --data traj --out prm --model encoder --tag-after proposal   # all-MiniLM-L6-v2
    helpgate prm train --data traj --out prm --model encoder:PATH                   # any local HF encoder

The route FrugalGPT's scorer and RouteLLM's BERT router take: the encoder reads one decision point as
the PRM renders it (``Step t: <state> Proposal: <proposal> TAG``: the question, what the agent saw and
what it proposes), its token states are mean-pooled (how all-MiniLM-L6-v2 was trained to embed), and
the value head maps the pooled vector to P(correct). Unlike the causal backbone, a bidirectional
encoder cannot score every step of an episode in one pass (an early step would read later ones), so
each step is its own window: the earlier steps it reads are ``history`` (default 0: the step alone).

A window longer than ``max_length`` (default 256, the length the embedded model was trained at)
keeps its first and last halves and drops the middle: a ProductQA state opens with the question and
the product and ends with the proposal, and its middle is the table schema and the memory lines.

Everything else is the causal PRM's (``prm.verifiers.model``): the value head, the calibrator, scoring through
``score_episodes`` / ``score_last``, hence ``prm score`` and the gate's ``PrmScorer``. ``save`` always
writes the fine-tuned encoder with ``save_pretrained`` (safetensors) into ``backbone/``; ``load``
reads only safetensors from there.
"""

from __future__ import annotations

from pathlib import Path

import torch

from prm.verifiers.backbones import EMBEDDED_ENCODER, TINY_ENCODER, encoder_name
from prm.verifiers.model import BACKBONE_DIR, PRMSettings, ProcessRewardModel, ValueHead, _portable_name
from prm.inputs.render import DEFAULT_TAG, Window

DEFAULT_MAX_LENGTH = 256


def load_encoder(name: str, device: str | None = None, dtype: torch.dtype | None = None, seed: int = 0,
                 saved: bool = False):
    """``(model, tokenizer)``: ``minilm`` (embedded), ``tiny`` (random, MiniLM's tokenizer) or a folder / id.
    ``saved``: a PRM's own ``backbone/`` folder, read from safetensors only."""
    from transformers import AutoModel, AutoTokenizer, BertConfig

    from agile.models import embedder_dir, pick_device

    target = pick_device(device)
    source = str(embedder_dir()) if name in (EMBEDDED_ENCODER, TINY_ENCODER) else name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        if name == TINY_ENCODER:
            torch.manual_seed(seed)
            model = AutoModel.from_config(BertConfig(
                vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=512), add_pooling_layer=False)
        else:
            model = AutoModel.from_pretrained(source, add_pooling_layer=False, use_safetensors=True if saved else None)
    except (OSError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise OSError(f"Could not load encoder {name!r} ({first}). Pass encoder (the embedded all-MiniLM-L6-v2), "
                      "encoder:tiny, or encoder:FOLDER with a Hugging Face encoder and its tokenizer.") from error
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None or tokenizer.pad_token_id is None:
        raise ValueError(f"encoder {name!r}: its tokenizer has no [CLS]/[SEP]/[PAD] tokens; use a BERT-style encoder.")
    model.to(dtype or torch.float32).to(target).train(False)
    return model, tokenizer


class EncoderPRM(ProcessRewardModel):
    """``ProcessRewardModel`` whose backbone is an encoder read by mean pooling, one step per window."""

    @classmethod
    def create_encoder(cls, model: str, *, tag_after: str = "action", max_length: int | None = None,
                       history: int | None = None, tag_text: str = DEFAULT_TAG, device: str | None = None,
                       dtype: torch.dtype | None = None, seed: int = 0) -> EncoderPRM:
        """A fresh cross-encoder PRM on ``model`` (``encoder`` or ``encoder:NAME``), every weight trainable."""
        name = encoder_name(model)
        if name is None:
            raise ValueError(f"{model!r} is not an encoder name; use encoder or encoder:NAME.")
        if history is not None and history < 0:
            raise ValueError(f"history={history}: keep 0 or more earlier steps.")
        backbone, tokenizer = load_encoder(name, device, dtype, seed)
        settings = PRMSettings(
            backbone=name if name in (EMBEDDED_ENCODER, TINY_ENCODER) else _portable_name(name), head="value",
            tag_text=tag_text, tag_after=tag_after, max_length=max_length or DEFAULT_MAX_LENGTH,
            hidden_size=backbone.config.hidden_size, history=0 if history is None else history, encoder=True,
        )
        head = ValueHead(settings.hidden_size).to(backbone.device)
        for p in backbone.parameters():
            p.requires_grad_(True)
        return cls(backbone, tokenizer, head, settings)

    @classmethod
    def restore(cls, directory: Path, settings: PRMSettings, device: str | None = None,
                dtype: torch.dtype | None = None) -> EncoderPRM:
        """The PRM ``save`` wrote: the fine-tuned encoder from ``backbone/`` (safetensors), then the head."""
        backbone, tokenizer = load_encoder(str(directory / BACKBONE_DIR), device, dtype, saved=True)
        if backbone.config.hidden_size != settings.hidden_size:
            raise ValueError(f"{directory}: its head reads width {settings.hidden_size}, its encoder has "
                             f"{backbone.config.hidden_size}; the folder is damaged, train it again.")
        for p in backbone.parameters():
            p.requires_grad_(False)
        return cls(backbone, tokenizer, ValueHead(settings.hidden_size).to(backbone.device), settings)

    @property
    def context(self) -> int:
        # No left cut: ``frame`` fits every window by dropping its middle instead.
        return 1 << 30

    def _core(self):
        return self.backbone

    def frame(self, window: Window) -> Window:
        """``[CLS] window [SEP]``, its middle dropped to fit ``max_length`` (the tag stays last)."""
        tokenizer = self.tokenizer
        limit = min(self.settings.max_length or DEFAULT_MAX_LENGTH,
                    self.backbone.config.max_position_embeddings) - 2
        ids = list(window.ids)
        dropped = window.dropped
        if len(ids) > limit:
            first = limit // 2
            dropped += len(ids) - limit
            ids = ids[:first] + ids[len(ids) - (limit - first):]
        ids = [tokenizer.cls_token_id] + ids + [tokenizer.sep_token_id]
        return Window(window.episode, ids, list(window.steps), [len(ids) - 2], dropped)

    def hidden_at_tags(self, batch) -> torch.Tensor:
        """The mean of each window's token states (one window per step, so one row per tag)."""
        out = self.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        mask = batch.attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
        pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return pooled[batch.rows]

    def save(self, directory, save_backbone: bool | None = None) -> Path:
        # The fine-tuned encoder is the model: it is always written (save_pretrained: safetensors).
        return super().save(directory, save_backbone=True)
