"""Self-consistency of the constrained policy: k turns sampled beside the greedy one, as two signals or a vote.

    decoder = ConstrainedDecoder(model, tokenizer, samples=8, seed=0)              # the signals
    decoder = ConstrainedDecoder(model, tokenizer, samples=8, seed=0, vote=True)   # the majority turn

A constrained turn is two choices, each by the model's log-probabilities over a few candidates: the
function among the allowed ones, then (for an answer) the line among yes / no / the ids shown / the
model's own line. With ``samples = k`` the decoder also draws k turns from the same distributions
(temperature 1, ``softmax`` of those log-probabilities) and compares them with the greedy turn:

- ``consistency_agree``: the share of the k samples that are the greedy turn;
- ``consistency_entropy``: the entropy (nats) of the k samples, counted as turns.

A turn counts by its key: ``search`` for any query (the query itself is not sampled), ``advice``,
or the answer line (lowercased, spaces collapsed). The draws reuse the log-probabilities the greedy
turn computed: the prompt is never prefilled again, whatever k. Only where the greedy turn searched
(and so scored no answer line) are the answer lines scored once for the samples, from the prompt's
cached keys and values: the few tokens of ``[PredictAnswer]`` that the query does not share are
prefilled and the model's own line is decoded, the same for any k. The generator is seeded
from the decoder's seed and the prompt's tokens, so a decision's samples do not depend on batching or
on what ran before (a decoder called with ``seeds`` draws each decision from its own seed instead).

With ``vote=True`` the turn is the samples' **majority** (``majority``), as self-consistency decoding
(Wang et al., 2022) answers with the most frequent of the answers of sampled reasoning paths: here a path is
one constrained turn, and the turns are compared by their key, so an answer that several lines spell alike
(the free line "Yes" and the line "yes") gathers all their votes. This is the compute help
(``agile.executor.self_consistency``).
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from agile.seeding import derive_seed

CONSISTENCY_KEYS = ("consistency_agree", "consistency_entropy")
"""The signals a decoder with ``samples > 0`` adds to each turn (module docstring)."""


def answer_key(line: str) -> str:
    """What two turns must share to count as the same: the first line, lowercased, spaces collapsed."""
    return " ".join(line.split("\n", 1)[0].lower().split())


def consistency_signals(greedy: str, samples: Sequence[str]) -> dict[str, float]:
    """Agreement of the ``samples``' keys with the ``greedy`` key and the entropy of the samples."""
    keys = [answer_key(s) for s in samples]
    n = len(keys)
    entropy = -sum(c / n * math.log(c / n) for c in Counter(keys).values())
    agree = sum(key == answer_key(greedy) for key in keys) / n
    return {"consistency_agree": float(agree), "consistency_entropy": float(entropy) + 0.0}


def majority(keys: Sequence[str], greedy: str, log_probs: Mapping[str, float]) -> str:
    """The key most of ``keys`` share. A tie goes to ``greedy`` where it is among the tied keys: a tie is no
    evidence against the agent's own turn. Else to the tied key of the highest ``log_probs`` (the model's
    probability that one sample is that turn: the count the k draws estimate, without their noise); then to
    the one drawn first."""
    counts = Counter(keys)  # in the order first drawn
    top = max(counts.values())
    tied = [key for key, count in counts.items() if count == top]
    if greedy in tied:
        return greedy
    return max(tied, key=lambda key: log_probs.get(key, -math.inf))  # max keeps the first of equal ones


def decision_rng(seed: int, prompt: Sequence[int]) -> np.random.Generator:
    """The generator of one decision's samples: a pure function of the seed and the prompt's tokens."""
    digest = hashlib.blake2b(array("q", prompt).tobytes(), digest_size=16).hexdigest()
    return np.random.default_rng(derive_seed(seed, digest, "consistency"))


def draw(rng: np.random.Generator, log_probs: Sequence[float], k: int) -> list[int]:
    """``k`` indices drawn from ``softmax(log_probs)``."""
    scores = np.asarray(log_probs, dtype=np.float64)
    p = np.exp(scores - scores.max())
    return rng.choice(len(scores), size=k, p=p / p.sum()).tolist()
