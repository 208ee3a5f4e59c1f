"""The memory of one ProductQA session: earlier questions with their answers, and retrieval.

AGILE's agent keeps the QA pairs of a session in a memory and, before answering, retrieves the
entries relevant to the new question. An answer obtained by seeking advice (an intervention) is
stored as the expert gave it, which is what makes an early intervention pay off later in the
session; the agent's own answers are stored too, marked with their source so that a reader (the
LLM, the helper) can tell a verified answer from a guess.

Retrieval is deliberately simple and deterministic: entries about the same product come first,
then entries sharing product features or content words with the question; ties go to the most
recent entry. A fuller embedding memory lives elsewhere; this one only has to be cheap, exact
and easy to reason about (it is used inside every decision of every rollout).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agile.envs.phrasing import content_words


@dataclass(frozen=True)
class MemoryEntry:
    """One answered question of the session."""

    question: str
    answer: str
    source: str
    """Who produced the answer: ``base`` (the agent itself), ``strong`` or ``human``."""
    asin: str
    step: int
    """The decision index at which it was stored."""
    features: tuple[str, ...] = ()
    """Names of the product features the question mentions (from the group's schema)."""

    @property
    def from_advice(self) -> bool:
        """True when the answer came from an intervention (not the agent's own guess)."""
        return self.source != "base"


@dataclass
class SessionMemory:
    """A list of entries with top-k retrieval. ``feature_names`` are the group's schema keys."""

    feature_names: tuple[str, ...] = ()
    entries: list[MemoryEntry] = field(default_factory=list)

    def mentioned_features(self, text: str) -> tuple[str, ...]:
        """Schema features whose name (all its content words) occurs in ``text``."""
        words = content_words(text)
        found = []
        for name in self.feature_names:
            name_words = content_words(name.replace("_", " "))
            if name_words and name_words <= words:
                found.append(name)
        return tuple(found)

    def add(self, question: str, answer: str, source: str, asin: str, step: int) -> MemoryEntry:
        entry = MemoryEntry(question, answer, source, asin, step, self.mentioned_features(question))
        self.entries.append(entry)
        return entry

    def retrieve(self, question: str, asin: str, k: int = 3) -> list[MemoryEntry]:
        """Up to ``k`` relevant entries, best first; an entry with nothing in common is skipped.

        Score: same product (dominates), then shared schema features (count twice), then shared
        content words; ties go to the most recent entry.
        """
        if k <= 0:
            return []
        words = content_words(question)
        features = set(self.mentioned_features(question))
        scored = []
        for entry in self.entries:
            same = entry.asin == asin
            overlap = len(words & content_words(entry.question)) + 2 * len(features & set(entry.features))
            if not same and overlap == 0:
                continue
            scored.append(((same, overlap, entry.step), entry))
        scored.sort(key=lambda pair: pair[0], reverse=True)
        return [entry for _, entry in scored[:k]]

    def clone(self) -> SessionMemory:
        # Entries are frozen, so copying the list is a full, independent copy.
        return SessionMemory(self.feature_names, list(self.entries))

    def __len__(self) -> int:
        return len(self.entries)
