"""What a question's wording says about the answer it asks for (text every agent sees).

``is_yes_no_question``: the last question sentence starts like a yes/no question ("Does it ...?",
"I hate smears. Are these any better?"). Agents use it to pick the answer's form, the PRM's
proposal features read it; neither reads the dataset's question type.
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
