"""What a question's wording says about the answer it asks for (text every agent sees).

``is_yes_no_question``: the last question sentence starts like a yes/no question ("Does it ...?",
"I hate smears. Are these any better?"). Agents use it to pick the answer's form, the PRM's
proposal features read it; neither reads the dataset's question type.

``content_words``: the words that say what a question is about (stopwords dropped), the unit of the
lexical memories' overlap.
"""

from __future__ import annotations

import re

_YES_NO_START = re.compile(
    r"^(do|does|did|is|are|was|were|am|can|could|will|would|should|shall|has|have|had|may|might|must)\b",
    re.IGNORECASE,
)


def is_yes_no_question(question: str) -> bool:
    """Whether the last question sentence starts like a yes/no question ("Does it ...?")."""
    sentences = [s.strip() for s in re.split(r"(?<=[.?!])\s+", question) if s.strip()]
    asked = [s for s in sentences if s.endswith("?")] or sentences
    return bool(asked) and bool(_YES_NO_START.match(asked[-1]))


_WORD = re.compile(r"[a-z0-9]+")
# Words too common in product questions to signal relatedness.
_STOPWORD_TEXT = """a an the and or but if of to in on at for with by from as is are was were be been being
    do does did can could will would should shall may might must has have had this that these
    those it its it's i i'm me my we our you your they them their there here what which who whom
    how why when where any some all more most much many very so not no yes than then too also
    just about into over under up down out off one get got need want like looking find product
    products"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def content_words(text: str) -> frozenset[str]:
    """Lower-cased words of ``text`` minus stopwords and single characters (the unit of overlap)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1)
