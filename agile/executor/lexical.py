"""Lexical retrieval for the executor's memory: content words hashed into a unit vector.

    memory = Memory(LexicalEmbedder())        # the same Memory, retrieval by shared words

``LexicalEmbedder`` has ``Embedder``'s interface (``encode(texts) -> [n, 384]`` unit rows), so
``Memory`` ranks entries by the cosine of their bags of content words: two questions sharing no
content word score 0, identical bags score 1. It needs no model: cheap, exact and deterministic,
for CPU runs and for reading retrieval by eye. A word's slot is its CRC-32 modulo the dimension
(stable across processes, unlike Python's ``hash``); two words may share a slot, which only ever
raises a score. The similarity threshold of the proxy reward (0.46) was set for MiniLM's cosines;
on bags of words it means "about half the words shared".
"""

from __future__ import annotations

import zlib

import numpy as np

from agile.envs.phrasing import content_words
from agile.executor.memory import EMBED_DIM


class LexicalEmbedder:
    """Bag-of-content-words vectors with ``Embedder``'s interface (module docstring)."""

    def __init__(self, dim: int = EMBED_DIM):
        self.dim = dim

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-norm rows (all zero for a text without content words), shape ``[len(texts), dim]``."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in content_words(text):
                out[row, zlib.crc32(word.encode()) % self.dim] = 1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out
