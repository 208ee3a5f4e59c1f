"""The agent's memory: per-product QA history and group-level knowledge, retrieved by cosine top-k.

AGILE's memory holds two kinds of entries:

- **QA history** (``add_qa``): a question with its answer, filed under the product (asin) it is
  about; ``[RetrieveMemory]`` shows the past questions on the *same* product closest to the new one.
- **knowledge** (``add_knowledge``): a sentence that ``[Reflection]`` distilled from advice,
  valid for the whole product group (e.g. "Bluetooth headphones add latency"). A reflection that
  says "no information" is not stored, nor is a verbatim duplicate.

Entries are embedded with the embedded all-MiniLM-L6-v2 (mean pooling over the last hidden state,
L2-normalised, as sentence-transformers does), so cosine similarity is a dot product. The memory
lives for one episode (a sequence of sessions on one group) and is saved as ``entries.json`` plus
``embeddings.npy``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from agile.executor.reflection import is_no_information

EMBED_DIM = 384


class Embedder:
    """Sentence embeddings from all-MiniLM-L6-v2 through ``transformers``, with a text cache.

    The cache matters: the same questions are embedded for retrieval, for the similarity counts
    of the proxy reward and again in every PPO iteration. Texts are encoded one at a time by default:
    in a batch a vector moves by ~1e-7 with its batch-mates' padding, so a resumed collection (which
    meets the texts in other batches) would not equal an uninterrupted one.
    """

    def __init__(self, path: str | Path | None = None, device: str = "cpu", batch_size: int = 1,
                 max_length: int = 128):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from agile.models import embedder_dir

        folder = Path(path) if path else embedder_dir()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).to(device).eval()
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self._torch = torch
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-norm embeddings, shape ``[len(texts), 384]``, float32."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        torch = self._torch
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start:start + self.batch_size]
            batch = self.tokenizer(chunk, padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.no_grad():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
            for text, vector in zip(chunk, pooled.float().cpu().numpy()):
                self._cache[text] = vector
        if not texts:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts]).astype(np.float32)


def cosine_top_k(query: np.ndarray, matrix: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and cosine scores of the ``k`` rows of ``matrix`` closest to ``query``, best first.

    Rows need not be normalised. Ties keep the lower index first (a stable sort), so retrieval
    is deterministic.
    """
    if k <= 0 or matrix.shape[0] == 0:
        return []
    q = query / max(float(np.linalg.norm(query)), 1e-12)
    norms = np.maximum(np.linalg.norm(matrix, axis=1), 1e-12)
    scores = (matrix @ q) / norms
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order]


@dataclass
class MemoryEntry:
    """One stored item. ``kind`` is ``qa`` (product history) or ``knowledge`` (group level)."""

    kind: str
    text: str
    """What retrieval shows: ``Q: ... A: ...`` for history, the sentence for knowledge."""
    key: str
    """What is embedded: the question for history, the sentence for knowledge."""
    asin: str = ""
    session: int = -1
    """Index of the session that wrote it."""
    from_advice: bool = True
    """Written from a human's advice (its answer, or a reflection on it), not the agent's own answer."""


@dataclass
class Retrieved:
    """The result of one ``[RetrieveMemory]``: entries with their cosine scores, best first."""

    knowledge: list[tuple[MemoryEntry, float]]
    history: list[tuple[MemoryEntry, float]]


class Memory:
    """Entries plus their embedding matrix; ``clone`` gives an independent copy for branching."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self.entries: list[MemoryEntry] = []
        self.vectors = np.zeros((0, EMBED_DIM), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.entries)

    # -- writing ----------------------------------------------------------------------------

    def add_qa(self, question: str, answer: str, asin: str, session: int = -1,
               from_advice: bool = True) -> MemoryEntry:
        """File a question and its answer under product ``asin`` (``[UpdateMemory]``)."""
        text = f"Q: {' '.join(question.split())} A: {' '.join(str(answer).split())}"
        return self._add(MemoryEntry("qa", text, question, asin, session, from_advice))

    def add_knowledge(self, text: str, session: int = -1) -> MemoryEntry | None:
        """Store a reflection; None (nothing stored) for "no information" or a duplicate."""
        text = " ".join(str(text).split())
        if is_no_information(text) or self.has_knowledge(text):
            return None
        return self._add(MemoryEntry("knowledge", text, text, "", session))

    def has_knowledge(self, text: str) -> bool:
        text = " ".join(str(text).split())
        return any(e.kind == "knowledge" and e.text == text for e in self.entries)

    def _add(self, entry: MemoryEntry) -> MemoryEntry:
        vector = self.embedder.encode([entry.key])
        self.entries.append(entry)
        self.vectors = np.concatenate([self.vectors, vector], axis=0)
        return entry

    # -- reading ----------------------------------------------------------------------------

    def _search(self, query: str, k: int, keep) -> list[tuple[MemoryEntry, float]]:
        rows = [i for i, e in enumerate(self.entries) if keep(e)]
        if not rows or k <= 0:
            return []
        q = self.embedder.encode([query])[0]
        hits = cosine_top_k(q, self.vectors[rows], k)
        return [(self.entries[rows[i]], score) for i, score in hits]

    def retrieve(self, query: str, asin: str, k_history: int = 2, k_knowledge: int = 2) -> Retrieved:
        """Top-k knowledge of the group and top-k history of product ``asin`` for ``query``."""
        return Retrieved(self._search(query, k_knowledge, lambda e: e.kind == "knowledge"),
                         self._search(query, k_history, lambda e: e.kind == "qa" and e.asin == asin))

    def similarities(self, query: str) -> np.ndarray:
        """Cosine similarity of ``query`` to every entry's key, in entry order."""
        if not self.entries:
            return np.zeros(0, dtype=np.float32)
        return self.vectors @ self.embedder.encode([query])[0]

    def count_similar(self, query: str, threshold: float) -> int:
        """Number of entries whose key has cosine >= ``threshold`` with ``query``."""
        return int((self.similarities(query) >= threshold).sum())

    # -- copies and files -------------------------------------------------------------------

    def clone(self) -> "Memory":
        other = Memory(self.embedder)
        other.entries = [MemoryEntry(**asdict(e)) for e in self.entries]
        other.vectors = self.vectors.copy()
        return other

    def save(self, folder: str | Path) -> Path:
        """Write ``entries.json`` and ``embeddings.npy`` into ``folder`` (created if needed)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "entries.json").write_text(json.dumps([asdict(e) for e in self.entries], indent=1))
        np.save(folder / "embeddings.npy", self.vectors)
        return folder

    @classmethod
    def load(cls, folder: str | Path, embedder: Embedder) -> "Memory":
        folder = Path(folder)
        for name in ("entries.json", "embeddings.npy"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name}: missing; a saved memory folder holds "
                                        "entries.json and embeddings.npy (Memory.save writes both).")
        memory = cls(embedder)
        memory.entries = [MemoryEntry(**row) for row in json.loads((folder / "entries.json").read_text())]
        memory.vectors = np.load(folder / "embeddings.npy", allow_pickle=False).astype(np.float32)
        if memory.vectors.shape != (len(memory.entries), EMBED_DIM):
            raise ValueError(f"{folder / 'embeddings.npy'}: shape {memory.vectors.shape} does not "
                             f"match {len(memory.entries)} entries x {EMBED_DIM}; the two files "
                             "come from different saves, save the memory again.")
        return memory
