"""Memory: cosine top-k against brute force with real MiniLM embeddings, writes, save/load."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from agile.executor.memory import Embedder, Memory, cosine_top_k
from agile.executor.reflection import gold_reflection, is_no_information

SENTENCES = [
    "Are these wiper blades easy to install?",
    "How hard is it to put these wiper blades on my car?",
    "Do these headphones cancel noise?",
    "Is the battery of this power bank good for two phone charges?",
    "Will this coffee machine make espresso?",
    "Can I brew a latte with this espresso maker?",
    "What is the cheapest Bosch blade you have?",
    "Is this lens good for astrophotography?",
    "Bluetooth headphones add latency, so they are unfit for video editing.",
    "Silicone wiper blades repel water better than rubber ones.",
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def brute_force(query, rows, k):
    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    scored = [(cos(query, row), -i, i) for i, row in enumerate(rows)]
    scored.sort(reverse=True)  # best score first; ties: lower index first (via -i)
    return [i for _, _, i in scored[:k]]


def test_embeddings_are_unit_norm_and_cached(embedder):
    vectors = embedder.encode(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    again = embedder.encode(SENTENCES[:2])
    assert np.array_equal(again, vectors[:2])


def test_cosine_top_k_matches_brute_force(embedder):
    vectors = embedder.encode(SENTENCES).astype(np.float64)
    # Unnormalised rows too: cosine must not depend on the scale of a row.
    scaled = vectors * np.arange(1, len(SENTENCES) + 1)[:, None]
    for qi, k in itertools.product(range(len(SENTENCES)), (1, 3, len(SENTENCES))):
        query = vectors[qi] * 2.5
        got = [i for i, _ in cosine_top_k(query, scaled, k)]
        assert got == brute_force(query.tolist(), scaled.tolist(), k)
        scores = [s for _, s in cosine_top_k(query, scaled, k)]
        assert scores == sorted(scores, reverse=True)


def test_cosine_top_k_ties_and_edges():
    matrix = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    assert [i for i, _ in cosine_top_k(np.array([1.0, 0.0]), matrix, 3)] == [0, 1, 2]
    assert cosine_top_k(np.array([1.0, 0.0]), np.zeros((0, 2)), 3) == []
    assert cosine_top_k(np.array([1.0, 0.0]), matrix, 0) == []


def test_retrieval_is_semantic_and_per_product(embedder):
    memory = Memory(embedder)
    memory.add_qa("How hard is it to put these wiper blades on my car?", "Very easy.", "A1")
    memory.add_qa("Do these headphones cancel noise?", "No.", "A1")
    memory.add_qa("Are these easy to install?", "Yes.", "B2")
    memory.add_knowledge(SENTENCES[8])
    memory.add_knowledge(SENTENCES[9])
    found = memory.retrieve("Are these wiper blades easy to install?", "A1", k_history=2, k_knowledge=1)
    assert [e.text for e, _ in found.history][0].startswith("Q: How hard is it to put")
    assert all(e.asin == "A1" for e, _ in found.history)  # product B2's history is not shown
    assert [e.text for e, _ in found.knowledge] == [SENTENCES[9]]
    assert memory.count_similar("Are these wiper blades easy to install?", 0.6) >= 1
    assert memory.count_similar("Are these wiper blades easy to install?", 1.01) == 0


def test_no_information_and_duplicates_are_not_stored(embedder):
    memory = Memory(embedder)
    assert memory.add_knowledge("no information") is None
    assert memory.add_knowledge("  No information. ") is None
    assert memory.add_knowledge("") is None
    assert memory.add_knowledge(SENTENCES[8]) is not None
    assert memory.add_knowledge(SENTENCES[8] + "  ") is None  # same after whitespace folding
    assert len(memory) == 1
    assert is_no_information("There is no information to add.")
    assert not is_no_information("Bluetooth adds latency.")


def test_save_load_and_clone(tmp_path, embedder):
    memory = Memory(embedder)
    memory.add_qa("Do these headphones cancel noise?", "No.", "A1", session=3)
    memory.add_knowledge(SENTENCES[9], session=4)
    memory.save(tmp_path / "mem")
    loaded = Memory.load(tmp_path / "mem", embedder)
    assert [e.__dict__ for e in loaded.entries] == [e.__dict__ for e in memory.entries]
    assert np.array_equal(loaded.vectors, memory.vectors)
    twin = memory.clone()
    twin.add_knowledge(SENTENCES[8])
    assert len(twin) == 3 and len(memory) == 2
    (tmp_path / "mem" / "embeddings.npy").unlink()
    with pytest.raises(FileNotFoundError, match="embeddings.npy"):
        Memory.load(tmp_path / "mem", embedder)


def test_gold_reflection():
    from agile.envs.productqa import Question

    reasoning = Question("r", "A", "q?", "yes", "long", "reasoning_qa", {"knowledge": "K  is   k."})
    fact = Question("f", "A", "q?", "yes", "long", "fact_qa", None)
    assert gold_reflection(reasoning) == "K is k."
    assert gold_reflection(fact) == "no information"
