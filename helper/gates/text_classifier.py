"""The text-backend helper classifier: a ``transformers`` sequence classifier on the state text.

The input is the decision point's ``state_text`` followed by one line that writes in what the
text alone does not say (``format_input``)::

    <state text>
    Decision 3 of 8. Interventions left: 2.

The line goes last because the classifier reads the last token and long states are truncated
from the left: the budget is never cut off. Training is plain class-weighted cross-entropy with
AdamW; ``model`` is any name ``agile.models`` accepts (``tiny`` for tests: a random-initialised
Llama of a few million parameters with the real SmolLM2 tokenizer; ``smollm2`` for the
embedded model, whose classification head starts random).

Saved as ``classifier.json``, the tokenizer's JSON files and the weights as ``model.safetensors``
(tensors only); loading reads safetensors and nothing else, so a folder never runs code.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from trajectories.files import read_kind_json

_KIND = "helpgate.helper.TextClassifier"


def format_input(state_text: str, step: int, horizon: int, budget_left: int) -> str:
    return f"{state_text}\nDecision {int(step) + 1} of {int(horizon)}. Interventions left: {int(budget_left)}."


class TextClassifier:
    """P(intervene) from text; ``fit``/``predict_proba``/``predict``/``save``/``load``."""

    def __init__(self, model: str = "tiny", max_length: int = 256, epochs: int = 2, batch_size: int = 16,
                 lr: float = 5e-4, seed: int = 0, device: str | None = None):
        self.model = model
        self.max_length = int(max_length)
        self.epochs = int(epochs)
        self.batch_size = int(batch_size)
        self.lr = float(lr)
        self.seed = int(seed)
        self.device = device
        self.network_ = None
        self.tokenizer_ = None
        # A fast tokenizer mutates its truncation/padding state per call ("Already borrowed" when
        # two threads share it), so encoding is serialised; the forward pass is not.
        self._tokenizer_lock = threading.Lock()

    # -- construction -------------------------------------------------------------------------
    def _build(self) -> None:
        from transformers import AutoModelForSequenceClassification

        from agile.models import TINY_LLM, load_tokenizer, pick_device, resolve_model, tiny_config

        tokenizer = load_tokenizer(self.model)
        torch.manual_seed(self.seed)
        if str(self.model) == TINY_LLM:
            config = tiny_config(len(tokenizer))
            config.num_labels = 2
            config.pad_token_id = tokenizer.pad_token_id
            network = AutoModelForSequenceClassification.from_config(config)
        else:
            network = AutoModelForSequenceClassification.from_pretrained(
                resolve_model(self.model), num_labels=2, dtype=torch.float32)
            network.config.pad_token_id = tokenizer.pad_token_id
        self._attach(network, tokenizer, pick_device(self.device))

    def _attach(self, network, tokenizer, device) -> None:
        # The end of the text (current question, budget line) matters most: cut long texts on the left.
        tokenizer.truncation_side = "left"
        tokenizer.padding_side = "left"
        self.network_ = network.to(device)
        self.tokenizer_ = tokenizer

    def _encode(self, texts: Sequence[str]):
        with self._tokenizer_lock:
            batch = self.tokenizer_(list(texts), padding=True, truncation=True, max_length=self.max_length,
                                    return_tensors="pt")
        return {k: v.to(self.network_.device) for k, v in batch.items()}

    # -- estimator API ---------------------------------------------------------------------------
    def fit(self, texts: Sequence[str], y: Sequence[int]) -> TextClassifier:
        texts, y = list(texts), np.asarray(y).astype(int)
        if len(texts) != y.size:
            raise ValueError(f"fit got {len(texts)} texts and {y.size} labels; give one label per text")
        self._build()
        counts = np.bincount(y, minlength=2).astype(np.float64)
        # Balanced class weights (n / (2 n_class)); an absent class gets weight 0.
        weights = np.where(counts > 0, y.size / (2 * np.maximum(counts, 1)), 0.0)
        loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights, dtype=torch.float32,
                                                                device=self.network_.device))
        optimizer = torch.optim.AdamW(self.network_.parameters(), lr=self.lr, weight_decay=0.01)
        generator = np.random.default_rng(self.seed)
        steps = self.epochs * math.ceil(y.size / self.batch_size)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - i / max(steps, 1))
        self.network_.train()
        for _ in range(self.epochs):
            order = generator.permutation(y.size)
            for start in range(0, y.size, self.batch_size):
                index = order[start:start + self.batch_size]
                logits = self.network_(**self._encode([texts[i] for i in index])).logits
                target = torch.as_tensor(y[index], device=logits.device)
                loss = loss_fn(logits.float(), target)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.network_.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
        self.network_.eval()
        return self

    @torch.inference_mode()
    def predict_proba(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """P(intervene) per text (1-D)."""
        if self.network_ is None:
            raise RuntimeError("TextClassifier is not fitted: call fit(texts, y) or TextClassifier.load(path)")
        texts = list(texts)
        size = batch_size or self.batch_size
        out = []
        for start in range(0, len(texts), size):
            logits = self.network_(**self._encode(texts[start:start + size])).logits.float()
            out.append(torch.softmax(logits, -1)[:, 1].cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0)

    def predict(self, texts: Sequence[str], threshold: float = 0.5) -> np.ndarray:
        return self.predict_proba(texts) >= threshold

    # -- persistence -----------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        if self.network_ is None:
            raise RuntimeError("TextClassifier is not fitted: nothing to save")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.network_.save_pretrained(directory / "model")  # safetensors
        self.tokenizer_.save_pretrained(directory / "model")
        meta = {"kind": _KIND, "model": str(self.model), "max_length": self.max_length, "epochs": self.epochs,
                "batch_size": self.batch_size, "lr": self.lr, "seed": self.seed}
        (directory / "classifier.json").write_text(json.dumps(meta, indent=2))
        return directory

    @classmethod
    def load(cls, directory: str | Path, device: str | None = None) -> TextClassifier:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from agile.models import pick_device

        directory = Path(directory)
        meta = read_kind_json(directory / "classifier.json", _KIND, "a text-backend classifier folder")
        self = cls(meta["model"], meta["max_length"], meta["epochs"], meta["batch_size"], meta["lr"], meta["seed"],
                   device)
        if not any((directory / "model").glob("*.safetensors")):
            raise ValueError(f"{directory / 'model'}: no *.safetensors weights (other weight formats can run code "
                             "when loaded and are refused); re-run `helpgate distill --backend text`.")
        network = AutoModelForSequenceClassification.from_pretrained(directory / "model", use_safetensors=True)
        tokenizer = AutoTokenizer.from_pretrained(directory / "model")
        self._attach(network.eval(), tokenizer, pick_device(device))
        return self

    def __repr__(self) -> str:
        return f"TextClassifier(model={self.model!r}, max_length={self.max_length}, fitted={self.network_ is not None})"
