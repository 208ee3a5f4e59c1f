"""What a deployed ProductQA agent's proposal shows, as numbers that mean the same in every product group.

``prm train --proposal-features`` feeds these to the value head beside the hidden state (and the agent's
signals), as ``--state-features`` does for TextWorld. They are read from the two texts a deployed agent has at
a decision point, the state (``state_text``: the AGILE executor's context, whose current question follows its
last ``[GetQuestion]``) and its own proposal transcript (``proposal_text``: its turns, and the executor's
answer to a turn it refused), never from the dataset's annotations (question type, gold answer, gold SQL):

- the proposal's form: ``searched`` (it wrote ``[SearchProduct]``: on the executor the rows are the answer),
  ``yesno`` (the answer is yes or no), ``free`` (any other answer), ``unanswered`` (neither a search nor an
  answer), ``fallback`` (a ``# fallback`` note);
- the search, where the transcript shows its outcome: ``sql_error`` (SQLite refused a query: the executor
  showed the error and asked again), ``search_empty`` (no row), ``search_rows`` (log(1 + rows found));
- the answer: ``answer_none`` (``none``), ``answer_ids`` (product ids it names), ``answer_words``
  (log(1 + words) of a free answer), ``answer_in_details`` (a free answer found word for word in the
  product's details line), ``yes`` (the yes/no answer is yes);
- the question: ``question_yesno`` (phrased as a yes/no question, the agent's own rule), ``question_words``
  (log(1 + words)), ``question_first_person`` (the customer speaks of themselves: I, my, me), ``question_trouble``
  (words of a fixed list that ask about a fault: issue, problem, noise, residue...), ``form_mismatch`` (a
  yes/no answer to a question not phrased as one, or an id / none / free answer to one that is);
- the state: ``details_yes_share`` (share of the product's yes/no details that say yes), ``detail_agrees``
  (+1 / -1 when the detail whose name shares the most words with the question says the same / the other
  yes-or-no as the answer, 0 when none matches or the answer is not yes/no), ``memory_human_yes_share`` (share
  of yes among the yes/no answers a person gave in the retrieved memory; 0.5 when none) and
  ``memory_human_answers`` (how many memory answers a person gave).

Each key is ``view:<name>`` in the head's signal columns (``prm.inputs.signals``): a value and a missing flag,
unpenalised. The same function reads a logged row (``prm train`` / ``prm score``) and a live decision
(``prm.scoring.scorer``: the observation's state and the proposal's text), so the two agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import polars as pl

from agile.envs.phrasing import is_yes_no_question

VIEW_PREFIX = "view:"
"""Prefix of the keys that name proposal features among a PRM's signal keys (``prm.inputs.signals``)."""

NAMES = (
    "searched", "yesno", "free", "unanswered", "fallback",
    "sql_error", "search_empty", "search_rows",
    "answer_none", "answer_ids", "answer_words", "answer_in_details", "yes",
    "question_yesno", "question_words", "question_first_person", "question_trouble", "form_mismatch",
    "details_yes_share", "detail_agrees", "memory_human_yes_share", "memory_human_answers",
)
KEYS = tuple(VIEW_PREFIX + name for name in NAMES)
"""Every proposal-feature key, in the order a PRM stores them."""

_SEARCH, _RESULT, _PREDICT = "[SearchProduct]", "[SearchResult]", "[PredictAnswer]"
_GET_QUESTION, _HISTORY = "[GetQuestion]", "History:"
_ASIN = re.compile(r"(?<![0-9A-Za-z])B0[0-9A-Z]{8}(?![0-9A-Za-z])", re.IGNORECASE)
_MORE = re.compile(r"\(\+(\d+) more\)")
_WORD = re.compile(r"[a-z0-9]+")
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|my|me|mine)\b", re.IGNORECASE)
_TROUBLE = re.compile(r"\b(issues?|problems?|complain\w*|defects?|imperfections?|drawbacks?|residue|leak\w*|noisy|"
                      r"noise|bulge|heavy|break\w*|broke\w*|damag\w*|fail\w*|difficult\w*|hard to|deter|"
                      r"uncomfortable|flimsy|cheap\w*|worse|slow\w*|overheat\w*|wear out|fade\w*)\b", re.IGNORECASE)
_MEMORY_ANSWER = re.compile(r"(?:^|\| )Q: .*? A: (.*?)(?= \| Q: |$)")
_STOP = frozenset("a an the of to in on for and or with is are be it this that these those does do can "
                  "will would should its by as at from me my i you your any".split())


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in _WORD.findall(text.lower()) if w not in _STOP}


def _last_line_with(lines: list[str], token: str) -> str | None:
    found = [line for line in lines if line.startswith(token)]
    return found[-1][len(token):].strip() if found else None


def _session(state_text: str) -> list[str]:
    """The lines of the current question's session: from its ``[GetQuestion]`` on."""
    text = state_text or ""
    return text[text.rfind(_GET_QUESTION):].split("\n") if _GET_QUESTION in text else []


def _question(session: list[str]) -> str:
    return session[0][len(_GET_QUESTION):].strip() if session else ""


def _details(session: list[str]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of the product line (``Product <asin>: <title> (name: value; ...)``)."""
    line = next((x for x in session[1:] if x.startswith("Product ")), "")
    if not line.endswith(")"):
        return []
    body = line[:-1]
    start = body.find(" (")
    while start >= 0:  # the details open at the first " (" after which every part is "name: value"
        parts = body[start + 2:].split("; ")
        if all(": " in part for part in parts):
            return [(name.strip(), value.strip()) for name, _, value in (p.partition(": ") for p in parts)]
        start = body.find(" (", start + 1)
    return []


def _memory_answers(session: list[str]) -> list[str]:
    """The answers of the retrieved QA history (filed from a person's advice)."""
    line = next((x for x in session if x.startswith(_HISTORY)), "")
    history = line[len(_HISTORY):].strip()
    return [] if history in ("", "none") else _MEMORY_ANSWER.findall(history)


def proposal_features(state_text: str, proposal_text: str) -> dict[str, float]:
    """The ``view:`` features of one decision point (see the module docstring)."""
    lines = [line.strip() for line in (proposal_text or "").split("\n") if line.strip()]
    searched = _last_line_with(lines, _SEARCH) is not None
    result = _last_line_with(lines, _RESULT)
    answer = _last_line_with(lines, _PREDICT)
    session = _session(state_text)
    out = dict.fromkeys(NAMES, 0.0)
    out["searched"] = float(searched)
    out["fallback"] = float("# fallback" in (proposal_text or ""))
    if result is not None:
        error = result.lower().startswith("sql error")
        empty = result.lower().startswith("no product")
        shown = len(_ASIN.findall(result))
        more = _MORE.search(result)
        out["sql_error"], out["search_empty"] = float(error), float(empty)
        out["search_rows"] = math.log1p(shown + (int(more.group(1)) if more else 0))
    question = _question(session)
    out["question_yesno"] = float(is_yes_no_question(question))
    out["question_words"] = math.log1p(len(question.split()))
    out["question_first_person"] = float(bool(_FIRST_PERSON.search(question)))
    out["question_trouble"] = float(len(_TROUBLE.findall(question)))
    human = [a.strip().lower().rstrip(".") for a in _memory_answers(session)]
    flagged = [a for a in human if a in ("yes", "no")]
    out["memory_human_answers"] = float(len(human))
    out["memory_human_yes_share"] = sum(a == "yes" for a in flagged) / len(flagged) if flagged else 0.5
    details = _details(session)
    flags = [v.lower() for _, v in details if v.lower() in ("yes", "no")]
    out["details_yes_share"] = sum(v == "yes" for v in flags) / len(flags) if flags else 0.5
    if answer is None:
        out["unanswered"] = float(not searched)
        return out
    said = answer.strip().lower().rstrip(".!")
    ids = _ASIN.findall(answer)
    out["answer_ids"] = float(len(ids))
    out["answer_none"] = float(said == "none")
    out["form_mismatch"] = float((said in ("yes", "no")) != bool(out["question_yesno"]))
    if said in ("yes", "no"):
        out["yesno"], out["yes"] = 1.0, float(said == "yes")
        asked = _words(question)
        best, overlap = None, 0
        for name, value in details:
            if value.lower() not in ("yes", "no"):
                continue
            shared = len(asked & _words(name))
            if shared > overlap:
                best, overlap = value.lower(), shared
        if best is not None:
            out["detail_agrees"] = 1.0 if best == said else -1.0
    elif not ids and said != "none":
        out["free"] = 1.0
        out["answer_words"] = math.log1p(len(said.split()))
        values = " ".join(value.lower() for _, value in details)
        out["answer_in_details"] = float(bool(said) and said in values)
    return out


def view_inputs(state_text: str, proposal_text: str) -> dict[str, float]:
    """``proposal_features`` under the ``view:`` keys a PRM reads them by."""
    return {VIEW_PREFIX + name: value for name, value in proposal_features(state_text, proposal_text).items()}


def frame_view_features(frame: pl.DataFrame) -> list[dict[str, float]]:
    """Every row's ``view:`` features, in row order (needs ``state_text`` and ``proposal_text``)."""
    missing = [c for c in ("state_text", "proposal_text") if c not in frame.columns]
    if missing:
        raise ValueError(f"proposal features read the columns state_text and proposal_text; the data lacks "
                         f"{missing} (collect with --decide-after proposal).")
    return [view_inputs(s, p) for s, p in zip(frame["state_text"].to_list(), frame["proposal_text"].to_list())]


def has_view_keys(keys: Mapping | list | tuple | None) -> bool:
    return any(str(k).startswith(VIEW_PREFIX) for k in (keys or ()))
