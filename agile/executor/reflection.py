"""Reflection: after advice, the LLM distils what generalises beyond this one question.

AGILE follows ``[SeekAdvice]`` with ``[Reflection] <text>``: a piece of group-level knowledge
("headphones with Bluetooth add latency, unfit for video editing") that ``[UpdateMemory]`` files
for later sessions, or "no information" when the advice was only about one product. A reflection
of "no information" (or an empty one) is not stored.

The gold reflection used for imitation data is the knowledge ProductQA records with a
reasoning question; fact and search questions carry none.
"""

from __future__ import annotations

from agile.envs.productqa import Question

NO_INFORMATION = "no information"


def is_no_information(text: str | None) -> bool:
    """True when a reflection carries nothing to store (empty, or says "no information")."""
    text = " ".join(str(text or "").lower().split()).strip(" .!")
    return not text or NO_INFORMATION in text


def gold_reflection(question: Question) -> str:
    """The reflection an expert would write after advising on ``question``."""
    extra = question.extra_data or {}
    knowledge = extra.get("knowledge") if question.type == "reasoning_qa" else None
    return " ".join(str(knowledge).split()) if knowledge else NO_INFORMATION
