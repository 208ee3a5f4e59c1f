"""ProcessRewardModel: a causal-LM backbone read at step tags, with one of two heads.

Both heads map the backbone's last hidden state ``h`` at a step tag (after the final norm) to a
logit whose sigmoid is P(episode succeeds | text up to this tag):

- ``tag``: Math-Shepherd scoring. The score is P(``+``) against P(``-``) at the tag, i.e.
  ``softmax([z+, z-])[0] = sigmoid(z+ - z-)`` with ``z = h @ W[row] + b``. The head holds its own
  copy of the LM-head rows of ``+`` and ``-`` (plus a bias pair), initialised from the backbone,
  so an untrained tag head gives exactly the LM's own +/- preference. Training updates only this
  copy (2 x hidden + 2 numbers) when the backbone is frozen. A copy rather than the LM head in
  place because SmolLM2 (like most small LMs) ties the LM head to the input embeddings: editing
  those rows would also change how every ``+``/``-`` in a state text is read, i.e. the features
  the head is trained on. With a copy the backbone stays bit-identical and the head is a convex
  logistic regression on fixed features.
- ``value``: a linear layer on standardised ``h`` (mean/scale fitted on training features, so
  one learning rate suits any backbone), then a sigmoid.

Only the hidden states at tag positions are projected, never the full vocabulary: the LM head
would cost ``vocab x hidden`` per token for two numbers per step.

Training modes: frozen backbone (head only) or LoRA adapters through ``peft`` plus the head
(``prm.training.finetune``). ``prm.verifiers.encoder`` subclasses this model for a bidirectional encoder: ``frame`` (a
hook, identity here) turns a rendered window into what the backbone reads, and ``load`` dispatches
on ``encoder`` in the settings.
Signals (``prm.inputs.signals``, value head on a frozen backbone): the agent's own confidence numbers are
appended to ``h`` before the head (``signal_keys`` in the settings fixes their order), so scoring
takes them per step (``score_episodes(..., signals=...)``; absent ones count as missing).
Calibration (``prm.verifiers.calibration``): when the folder has ``calibration.json``, every probability the
PRM returns goes through it (``probabilities``), so ``prm score`` and the gate give the same numbers.

``save(dir)`` writes ``prm_config.json``, ``head.safetensors`` and, as needed, the LoRA adapter
(``adapter/``, ``save_pretrained``) and/or the backbone (``backbone/``, ``save_pretrained``);
``prm.verifiers.load.load_prm(dir)`` restores it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from agile.models import TINY_LLM, load_causal_lm
from prm.inputs.batch import Batch, collate, pack
from prm.verifiers.calibration import CALIBRATION_FILE, Calibrator
from prm.inputs.render import DEFAULT_TAG, Renderer, Window, history_windows, prefix_windows, truncation_note, windows
from prm.inputs.signals import missing_block
from trajectories.files import read_json_object

HEADS = ("tag", "value")
POOLINGS = ("last", "mean")
"""What a step's hidden state is: the one at its tag (last token), or the mean over the step's tokens."""
CONFIG_FILE = "prm_config.json"
HEAD_FILE = "head.safetensors"
BACKBONE_DIR = "backbone"
ADAPTER_DIR = "adapter"
FORMAT_VERSION = 1

Episodes = Sequence[tuple[Sequence[str], ...]]
"""Episodes as (state texts, action texts), one entry per decision point, in step order; with
tag_after="proposal" (state texts, action texts, proposal texts)."""


class ContextTruncationWarning(UserWarning):
    """Some episodes did not fit the backbone's context and were cut from the left."""


@dataclass
class PRMSettings:
    """Everything needed to rebuild a PRM; stored as ``prm_config.json``."""

    backbone: str = "smollm2"
    """Backbone the PRM reads: the embedded smollm2, tiny, a local folder or a Hugging Face id."""
    head: str = "value"
    """value (linear head on the step-boundary hidden state) or tag (P(+) vs P(-) at the step tag)."""
    lora: bool = False
    """LoRA adapters were trained with the head (saved beside it unless merged into a saved backbone)."""
    lora_r: int = 8
    """LoRA rank."""
    lora_alpha: int = 16
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA branch during training."""
    lora_targets: list[str] | None = None
    """Modules the adapters wrap; None: every linear layer."""
    tag_text: str = DEFAULT_TAG
    """Text of the step tag whose position is scored."""
    tag_after: str = "action"
    """Where each step tag sits: after the action, the state or the base agent's proposal."""
    max_length: int | None = None
    """Context cap in tokens (None: the backbone's); longer episodes are cut from the left."""
    layers: int | None = None
    """Only the first this many backbone layers are kept (None: all)."""
    plus_id: int = -1
    """Token id of "+" (the tag head's positive row)."""
    minus_id: int = -1
    """Token id of "-" (the tag head's negative row)."""
    hidden_size: int = 0
    """Width of the hidden states the head reads; a backbone of another width is refused on load."""
    backbone_saved: bool = False
    """The backbone is saved inside the PRM folder (``save(copy_backbone=True)``), not named."""
    lora_merged: bool = False
    """The adapters are merged into that saved backbone."""
    signal_keys: list[str] | None = None
    """Names of the agent signals the head reads after the hidden state (``prm.inputs.signals``), in order."""
    hidden_inputs: bool = True
    """Whether the value head reads the backbone's hidden state; False: only the signal columns (agent signals,
    state features), which mean the same in every game (``prm train --no-hidden``)."""
    question_vector: int = 0
    """Width of the sentence encoder's vector of the step's question (``prm.inputs.evidence.question_vectors``)
    the value head reads between the hidden state and the signals, penalised like the hidden state; 0: none."""
    history: int | None = None
    """Earlier steps each score reads besides its own (``prm.inputs.render.history_windows``); None: the whole
    episode so far, in one pass."""
    pooling: str = "last"
    """The head reads the hidden state at the step's tag (last) or its mean over the step's tokens (mean)."""
    fold_heads: int = 0
    """The value head is the mean of this many heads, each fitted without one fold of the training episodes (the
    heads that wrote the training rows' out-of-fold scores, ``FoldMeanHead``); 0: one head fitted on every one."""
    encoder: bool = False
    """The backbone is a bidirectional encoder fine-tuned whole, mean-pooled over one window per step
    (``prm.verifiers.encoder``)."""
    format: int = FORMAT_VERSION
    """Version of the saved folder's layout (written with it; for readers of prm_config.json)."""

    @property
    def signal_width(self) -> int:
        """Columns the signals add to the head's input (a value and a missing flag per key)."""
        return 2 * len(self.signal_keys or ())

    @property
    def free_width(self) -> int:
        """Trailing signal columns the L2 penalty leaves free: every signal's but the words' (``prm.inputs.words``:
        a word-reading head reads nothing else, so its columns are all of them)."""
        from prm.inputs.words import penalised_width

        return self.signal_width - penalised_width(self.signal_keys)

    @property
    def head_width(self) -> int:
        """Columns of the value head's input: the hidden state (when read), the question's vector, the signals."""
        return (self.hidden_size if self.hidden_inputs else 0) + self.question_vector + self.signal_width


class ValueHead(nn.Module):
    def __init__(self, hidden: int, free_inputs: int = 0):
        super().__init__()
        self.free_inputs = free_inputs
        """Trailing inputs (the agent's signals) whose weights the L2 penalty leaves free (``prm.training.train``)."""
        self.linear = nn.Linear(hidden, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        self.register_buffer("mean", torch.zeros(hidden))
        self.register_buffer("scale", torch.ones(hidden))

    def fit_normalizer(self, features: torch.Tensor) -> None:
        """Standardise inputs with statistics of training features (hidden states have a few
        huge-magnitude dimensions that would otherwise dominate the learning rate)."""
        features = features.float()
        self.mean.copy_(features.mean(0))
        self.scale.copy_(features.std(0).clamp_min(1e-4))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear((hidden.float() - self.mean) / self.scale).squeeze(-1)


class FoldMeanHead(nn.Module):
    """The mean probability of the fold heads, as a logit.

    The solve cuts its cells and the thresholds set their levels on the training rows' out-of-fold scores, each
    written by a head fitted without that row's fold. A head fitted on every episode scores new steps on another
    scale (with few episodes it is surer: fewer test steps fall in the middle cells a table keeps its budget for);
    the fold heads' mean scores a new step with the very heads whose scores the cells were cut on."""

    def __init__(self, heads: list[nn.Module]):
        super().__init__()
        if not heads:
            raise ValueError("FoldMeanHead needs at least one head")
        self.heads = nn.ModuleList(heads)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        p = torch.stack([torch.sigmoid(h(hidden)) for h in self.heads]).mean(0)
        return torch.logit(p.clamp(1e-7, 1 - 1e-7))


class TagHead(nn.Module):
    def __init__(self, rows: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.rows = nn.Parameter(rows.detach().float().clone())
        self.bias = nn.Parameter(torch.zeros(2) if bias is None else bias.detach().float().clone())

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        z = hidden.float() @ self.rows.T + self.bias
        return z[..., 0] - z[..., 1]


def _single_id(tokenizer, text: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        raise ValueError(f"The tokenizer encodes {text!r} to nothing; the tag head needs a token for it.")
    # Sentencepiece tokenizers may prepend a word-boundary piece; the symbol is the last id.
    return ids[-1]


def _lm_rows(backbone, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    out = backbone.get_output_embeddings()
    rows = out.weight[ids].detach()
    bias = out.bias[ids].detach() if getattr(out, "bias", None) is not None else None
    return rows, bias


class ProcessRewardModel(nn.Module):
    """Backbone + head. ``score_episodes`` scores every step of every episode, one pass each."""

    def __init__(self, backbone, tokenizer, head: nn.Module, settings: PRMSettings):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.head = head
        self.settings = settings
        self.renderer = Renderer(tokenizer, settings.tag_text, settings.tag_after)
        self.calibrator: Calibrator | None = None
        """Score -> calibrated probability (``prm.verifiers.calibration``), applied by ``probabilities``."""
        self.last_run: dict = {}
        """Tokens, windows and seconds of the latest scoring call (for throughput reports)."""

    # ---------------------------------------------------------------- construction
    @classmethod
    def create(
        cls,
        backbone: str = "smollm2",
        head: str = "value",
        lora: bool = False,
        *,
        lora_r: int = 8,
        lora_alpha: int = 16,
        lora_dropout: float = 0.05,
        lora_targets: list[str] | None = None,
        tag_text: str = DEFAULT_TAG,
        tag_after: str = "action",
        max_length: int | None = None,
        layers: int | None = None,
        signal_keys: Sequence[str] | None = None,
        history: int | None = None,
        hidden_inputs: bool = True,
        question_vector: int = 0,
        pooling: str = "last",
        device: str | None = None,
        dtype: torch.dtype | None = None,
        seed: int = 0,
    ) -> ProcessRewardModel:
        """A fresh PRM on ``backbone`` (any name ``agile.models.load_causal_lm`` accepts).

        ``layers`` keeps only the first that many decoder layers (features from a middle layer:
        proportionally cheaper, and often as good for a probe); the tag head then reads the LM
        head rows against a middle layer, so it suits the value head best. ``signal_keys``: the
        agent signals the value head reads beside the hidden state (``prm.inputs.signals``). ``history``:
        each step's score reads only that many earlier steps (None: all, one pass per episode).
        ``hidden_inputs=False``: the value head reads the signal columns alone (``signal_keys`` needed).
        ``question_vector``: the width of the sentence encoder's vector of each step's question the value head
        also reads (``prm.inputs.evidence``; 0: none).
        ``pooling``: ``last`` reads the hidden state at each step's tag; ``mean`` averages it over
        the step's tokens (its header, state and tag), so a word said mid-step reaches the head
        even where a few causal layers do not carry it to the tag.
        """
        if question_vector and (head != "value" or lora):
            raise ValueError("question_vector is read by the value head on a frozen backbone: use head='value' "
                             "without lora.")
        if not hidden_inputs and (head != "value" or lora or not (signal_keys or question_vector)):
            raise ValueError("hidden_inputs=False leaves the value head only its signal columns: use head='value' "
                             "without lora, with signal keys (agent signals or state features).")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}: use one of {', '.join(POOLINGS)}.")
        if pooling != "last" and head == "tag":
            raise ValueError("pooling='mean' with the tag head: its +/- rows read the tag's own hidden state; "
                             "use head='value'.")
        if history is not None and history < 0:
            raise ValueError(f"history={history}: keep 0 or more earlier steps, or None for the whole episode.")
        if head not in HEADS:
            raise ValueError(f"head={head!r}: use one of {HEADS}.")
        if signal_keys and (head != "value" or lora):
            raise ValueError("signals are read by the value head on a frozen backbone: use head='value' without "
                             "lora, or train without signals.")
        if head == "tag" and layers:
            warnings.warn("layers= with the tag head: the +/- rows were trained against the last layer.", stacklevel=2)
        model, tokenizer = load_causal_lm(backbone, device=device, dtype=dtype, seed=seed)
        _keep_layers(model, layers)
        for p in model.parameters():
            p.requires_grad_(False)
        plus_id, minus_id = _single_id(tokenizer, "+"), _single_id(tokenizer, "-")
        hidden = model.config.get_text_config().hidden_size
        settings = PRMSettings(
            backbone=_portable_name(backbone),
            head=head,
            lora=lora,
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            lora_targets=lora_targets,
            tag_text=tag_text,
            tag_after=tag_after,
            max_length=max_length,
            layers=layers,
            plus_id=plus_id,
            minus_id=minus_id,
            hidden_size=hidden,
            signal_keys=list(signal_keys) if signal_keys else None,
            history=history,
            hidden_inputs=hidden_inputs,
            question_vector=question_vector,
            pooling=pooling,
        )
        if head == "tag":
            head_module = TagHead(*_lm_rows(model, [plus_id, minus_id]))
        else:
            head_module = ValueHead(settings.head_width, settings.free_width)
        if lora:
            model = _wrap_lora(model, settings)
        head_module.to(model.device)
        return cls(model, tokenizer, head_module, settings)

    @property
    def device(self) -> torch.device:
        return self._core().device

    @property
    def context(self) -> int:
        """Longest window fed to the backbone: ``max_length``, capped by its position limit."""
        config = self._core().config.get_text_config()
        limit = getattr(config, "max_position_embeddings", None) or 1 << 30
        return min(self.settings.max_length or limit, limit)

    def _core(self):
        """The transformers model (under the peft wrapper when there is one)."""
        return self.backbone.get_base_model() if hasattr(self.backbone, "get_base_model") else self.backbone

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    # ---------------------------------------------------------------- forward
    def hidden_at_tags(self, batch: Batch) -> torch.Tensor:
        """Final-norm hidden states at every tag of the batch, shape ``[n_tags, hidden]`` (with
        ``pooling="mean"``: each averaged over its step's tokens)."""
        # LoRA layers are injected in place, so the plain decoder call runs the adapters too.
        decoder = self._core().get_decoder()
        out = decoder(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
        )
        if self.settings.pooling == "mean":
            return mean_over_steps(out.last_hidden_state, batch.rows, batch.starts, batch.cols)
        return out.last_hidden_state[batch.rows, batch.cols]

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits (pre-sigmoid scores) at every tag of the batch, in ``batch.rows`` order (signals,
        if the head reads any, count as missing: ``score_episodes`` passes the real ones)."""
        return self.head(self.head_input(self.hidden_at_tags(batch)))

    def head_input(self, hidden: torch.Tensor, signals: np.ndarray | torch.Tensor | None = None,
                   states: Sequence[str] | None = None) -> torch.Tensor:
        """What the head reads: the hidden states, the question's vector of each step (from ``states``, the
        steps' state texts, when the PRM reads one), then the signal columns when the PRM has any (``signals``
        ``[rows, signal_width]`` from ``prm.inputs.signals``; None: all missing)."""
        keys = self.settings.signal_keys
        parts = [hidden.float()] if self.settings.hidden_inputs else []
        if self.settings.question_vector:
            if states is None or len(states) != hidden.shape[0]:
                raise ValueError(f"this PRM reads each step's question vector: pass the {hidden.shape[0]} steps' "
                                 f"state texts (got {None if states is None else len(states)}).")
            from prm.inputs.evidence import question_vectors

            parts.append(torch.from_numpy(question_vectors(list(states))).to(hidden.device))
        if keys:
            if signals is None:
                signals = missing_block(hidden.shape[0], keys)
            signals = torch.as_tensor(signals, dtype=torch.float32, device=hidden.device)
            if tuple(signals.shape) != (hidden.shape[0], self.settings.signal_width):
                raise ValueError(f"signals of shape {tuple(signals.shape)} for {hidden.shape[0]} steps; the PRM "
                                 f"reads {self.settings.signal_width} signal columns per step (keys {keys}).")
            parts.append(signals)
        if not parts:
            return hidden[:, :0].float()
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def probabilities(self, logits: torch.Tensor) -> np.ndarray:
        """sigmoid(logits), through the calibrator when the PRM has one (float32 numpy)."""
        p = torch.sigmoid(logits).float().cpu().numpy()
        return p if self.calibrator is None else self.calibrator(p).astype(np.float32)

    # ---------------------------------------------------------------- windows and batches
    def windows_for(self, episodes: Episodes, per_prefix: bool = False, warn: bool = True) -> list[Window]:
        """Render episodes and cut them into context-sized windows (one per step if per_prefix)."""
        rendered = self.renderer.render_many(episodes)
        history = self.settings.history
        if history is not None:
            found = [w for i, r in enumerate(rendered) for w in history_windows(i, r, history, self.context)]
        else:
            cut = prefix_windows if per_prefix else windows
            found = [w for i, r in enumerate(rendered) for w in cut(i, r, self.context)]
        note = truncation_note(found, len(episodes), self.context)
        if note and warn:
            warnings.warn(note, ContextTruncationWarning, stacklevel=2)
        return [self.frame(w) for w in found]

    def frame(self, window: Window) -> Window:
        """The window as the backbone reads it (a causal LM: as rendered; ``prm.verifiers.encoder`` adds its
        special tokens)."""
        return window

    def batches(self, found: Sequence[Window], batch_tokens: int):
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        device = self.device
        for chosen in pack(found, batch_tokens):
            yield collate([found[i] for i in chosen], pad, device)

    @torch.inference_mode()
    def _per_step(
        self,
        episodes: Episodes,
        fn: Callable[[Batch], torch.Tensor],
        batch_tokens: int,
        per_prefix: bool,
        progress: bool,
        desc: str,
    ) -> list[np.ndarray]:
        from tqdm.auto import tqdm

        start = time.perf_counter()
        found = self.windows_for(episodes, per_prefix=per_prefix)
        results: list[list] = [[None] * len(states) for states, *_ in episodes]
        total = sum(len(w.ids) for w in found)

        with tqdm(total=total, unit="tok", unit_scale=True, desc=desc, disable=not progress) as bar:
            for batch in self.batches(found, batch_tokens):
                values = fn(batch).float().cpu().numpy()
                cursor = 0
                for window in batch.windows:
                    for step in window.steps:
                        results[window.episode][step] = values[cursor]
                        cursor += 1
                bar.update(batch.tokens)
        self.last_run = {"tokens": total, "windows": len(found), "seconds": time.perf_counter() - start}
        return [np.asarray(r, dtype=np.float32) for r in results]

    def score_episodes(
        self,
        episodes: Episodes,
        batch_tokens: int = 16384,
        per_prefix: bool = False,
        progress: bool = False,
        signals: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        """P(success) at every step of every episode (one array per episode, in step order),
        calibrated when the PRM has a calibrator.

        One forward pass per episode (per window when it exceeds the context); ``per_prefix``
        instead feeds every step's prefix on its own (the slow reference, for tests and benchmarks).
        ``signals``: per episode, its steps' signal rows (``prm.inputs.signals.signal_matrix``) for a PRM
        that reads signals; None (or a None entry): all missing.
        """
        was_training = self.training
        self.eval()
        try:
            if not self.settings.signal_keys and not self.settings.question_vector:
                logits = self._per_step(episodes, self, batch_tokens, per_prefix, progress, "prm score")
                return [self.probabilities(torch.from_numpy(z)) for z in logits]
            if self.settings.hidden_inputs:
                hidden = self._per_step(episodes, self.hidden_at_tags, batch_tokens, per_prefix, progress,
                                        "prm score")
            else:  # the head reads no hidden state: no backbone pass, one empty row per step
                hidden = [np.zeros((len(states), 0), dtype=np.float32) for states, *_ in episodes]
            signals = signals if signals is not None else [None] * len(episodes)
            with torch.inference_mode():
                return [self.probabilities(self.head(self.head_input(torch.from_numpy(x).to(self.device), s,
                                                                     list(episode[0]))))
                        for x, s, episode in zip(hidden, signals, episodes)]
        finally:
            self.train(was_training)

    @torch.inference_mode()
    def score_last(self, episode: tuple[Sequence[str], ...], signals: np.ndarray | None = None) -> float:
        """P(success) at the last step of one episode, feeding only the window that holds its tag
        (a gate's decision-time score); ``signals``: that step's signal row, or None (missing)."""
        if not self.settings.hidden_inputs:  # the head reads no hidden state: no backbone pass
            row = None if signals is None else np.asarray(signals)[None]
            empty = torch.zeros((1, 0), device=self.device)
            return float(self.probabilities(self.head(self.head_input(empty, row, list(episode[0])[-1:])))[0])
        was_training = self.training
        self.eval()
        try:
            rendered = self.renderer.render_many([episode])[0]
            history = self.settings.history
            window = self.frame((history_windows(0, rendered, history, self.context) if history is not None
                                 else windows(0, rendered, self.context))[-1])
            pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
            hidden = self.hidden_at_tags(collate([window], pad, self.device))[-1:]
            row = None if signals is None else np.asarray(signals)[None]
            return float(self.probabilities(self.head(self.head_input(hidden, row, list(episode[0])[-1:])))[0])
        finally:
            self.train(was_training)

    def episode_features(self, episodes: Episodes, batch_tokens: int = 16384, progress: bool = False):
        """Hidden states at every step tag (``[n_steps, hidden]`` per episode), for frozen training."""
        self.eval()
        return self._per_step(episodes, self.hidden_at_tags, batch_tokens, False, progress, "prm features")

    # ---------------------------------------------------------------- persistence
    def save(self, directory: str | os.PathLike, save_backbone: bool | None = None) -> Path:
        """Write the PRM to ``directory`` (created); returns it.

        The backbone's weights are copied only when it cannot be reloaded by name: the random
        ``tiny`` model, or when ``save_backbone=True``. A LoRA adapter is saved with
        ``save_pretrained``; over a copied backbone the adapter is merged into the copy instead.
        """
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        settings = dataclasses.replace(self.settings)
        copy_backbone = save_backbone if save_backbone is not None else settings.backbone == TINY_LLM
        settings.backbone_saved = bool(copy_backbone)
        settings.lora_merged = bool(copy_backbone and settings.lora)
        if copy_backbone:
            weights = self.backbone
            if settings.lora:
                weights = copy.deepcopy(self.backbone).merge_and_unload()
            weights.save_pretrained(directory / BACKBONE_DIR)
            self.tokenizer.save_pretrained(directory / BACKBONE_DIR)
        elif settings.lora:
            self.backbone.save_pretrained(directory / ADAPTER_DIR)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}, directory / HEAD_FILE)
        (directory / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(settings), indent=2) + "\n")
        if self.calibrator is not None:
            self.calibrator.save(directory)
        else:
            (directory / CALIBRATION_FILE).unlink(missing_ok=True)  # a stale map must not outlive its head
        return directory

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        merge_lora: bool = False,
    ) -> ProcessRewardModel:
        """Restore a causal-LM PRM written by ``save``. ``merge_lora`` folds adapters in (faster scoring).
        A folder of either kind (an encoder PRM too) loads with ``prm.verifiers.load.load_prm``."""
        from safetensors.torch import load_file

        directory = Path(directory)
        settings = read_settings(directory)
        if settings.encoder:
            raise ValueError(f"{directory}: an encoder PRM; load it with prm.verifiers.load.load_prm.")
        source = directory / BACKBONE_DIR if settings.backbone_saved else settings.backbone
        model, tokenizer = load_causal_lm(source, device=device, dtype=dtype)
        width = model.config.get_text_config().hidden_size
        if width != settings.hidden_size:
            raise ValueError(
                f"{directory}: its head reads hidden states of width {settings.hidden_size}, but the backbone "
                f"{settings.backbone!r} has width {width}: the folder belongs to another backbone. Score with "
                "the PRM folder trained on this backbone, or train one (helpgate prm train)."
            )
        _keep_layers(model, settings.layers)
        for p in model.parameters():
            p.requires_grad_(False)
        if settings.lora and not settings.lora_merged:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, directory / ADAPTER_DIR)
            if merge_lora:
                model = model.merge_and_unload()
            model.eval()
        if settings.head == "tag":
            head = TagHead(torch.zeros(2, settings.hidden_size))
        elif settings.fold_heads:
            head = FoldMeanHead([ValueHead(settings.head_width, settings.free_width)
                                 for _ in range(settings.fold_heads)])
        else:
            head = ValueHead(settings.head_width, settings.free_width)
        try:
            head.load_state_dict(load_file(directory / HEAD_FILE))
        except FileNotFoundError:
            raise
        except Exception as error:  # safetensors and torch raise their own types for a bad file
            raise ValueError(f"{directory / HEAD_FILE}: not a readable head for this PRM ({type(error).__name__}: "
                             f"{' '.join(str(error).split())[:160]}); train the PRM again.") from error
        head.to(model.device)
        prm = cls(model, tokenizer, head, settings)
        prm.calibrator = Calibrator.load(directory)
        prm.eval()
        return prm



def read_settings(directory: str | os.PathLike) -> PRMSettings:
    """The ``PRMSettings`` a PRM folder was saved with, refused in one line naming the file."""
    config_path = Path(directory) / CONFIG_FILE
    if not config_path.exists():
        raise FileNotFoundError(
            f"{config_path} not found: {directory} is not a PRM folder. Train one with "
            "`helpgate prm train --data DIR --out DIR`."
        )
    raw = read_json_object(config_path, "helpgate prm train", "train the PRM again")
    known = {f.name for f in dataclasses.fields(PRMSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{config_path}: unknown keys {unknown}; it was written by a newer version.")
    return PRMSettings(**raw)

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}


def parse_dtype(name: str | None) -> torch.dtype | None:
    """``"bf16"``/``"fp16"``/``"fp32"`` to a torch dtype; None keeps the device default."""
    if name is None or isinstance(name, torch.dtype):
        return name
    if name.lower() not in DTYPES:
        raise ValueError(f"dtype={name!r}: use one of bf16, fp16, fp32 (or leave it unset).")
    return DTYPES[name.lower()]


def mean_over_steps(hidden: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """``[n, H]``: the mean of ``hidden[rows[i], starts[i] : ends[i] + 1]`` for every i."""
    positions = torch.arange(hidden.shape[1], device=hidden.device)
    inside = (positions >= starts[:, None]) & (positions <= ends[:, None])
    weights = (inside / inside.sum(1, keepdim=True)).to(hidden.dtype)
    pooled = hidden.new_empty(len(rows), hidden.shape[-1])
    # One small matrix product per batch row: gathering each step's tokens would copy the
    # sequence once per step.
    for row in rows.unique().tolist():
        chosen = rows == row
        pooled[chosen] = weights[chosen] @ hidden[row]
    return pooled


def _keep_layers(model, layers: int | None) -> None:
    """Drop every decoder layer after the first ``layers`` (in place; idempotent)."""
    if not layers:
        return
    decoder = model.get_decoder()
    stack = next(
        (
            getattr(decoder, n)
            for n in ("layers", "h", "blocks")
            if isinstance(getattr(decoder, n, None), nn.ModuleList)
        ),
        None,
    )
    if stack is None:
        raise ValueError(
            f"layers={layers}: cannot find the decoder layer list of {type(model).__name__}; leave layers unset."
        )
    if not 1 <= layers <= len(stack):
        raise ValueError(f"layers={layers}: the backbone has {len(stack)} decoder layers; pick 1..{len(stack)}.")
    del stack[layers:]
    config = model.config.get_text_config()
    config.num_hidden_layers = layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:layers]


def _portable_name(name) -> str:
    """Store local folders as absolute paths so a saved PRM loads from any working directory."""
    text = str(name)
    return str(Path(text).resolve()) if Path(text).exists() else text


def _wrap_lora(model, settings: PRMSettings):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        # "all-linear" adapts every linear layer except the LM head: the usual QLoRA recipe.
        target_modules=settings.lora_targets or "all-linear",
        bias="none",
    )
    return get_peft_model(model, config)
