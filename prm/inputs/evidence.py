"""The record an answer should rest on, retrieved for the verifier: question against evidence, as numbers.

The proposal features (``prm.inputs.visible``) read the proposal's form; they never check it against the
record the environment holds. A ProductQA decision point carries that record in its two texts: the product's
line (``Product <asin>: <title> (name: value; ...)``), the table's schema (its columns and their values),
the retrieved memory (``History: Q: ... A: ...``), and, in the proposal, the agent's SQL. This module
retrieves, with the embedded sentence encoder (all-MiniLM-L6-v2, unit vectors: a dot product is a cosine),
the record lines most relevant to the question, and measures how the proposal stands against them:

- the product's details: ``detail_top_sim`` (cosine of the question and its nearest ``name: value`` line),
  ``detail_margin`` (nearest minus second), ``detail_top_yesno`` (that line's value is yes or no),
  ``detail_top_agrees`` (+1 / -1 when a yes/no answer says the same / the other as that line, 0 otherwise),
  ``detail_weighted_agrees`` (the same over every yes/no line, weighted by a softmax of its similarity),
  ``title_sim`` (the question against the product's title: is it about this product at all);
- the question and the table: ``question_values`` (values of the table's schema named in the question, log(1 + n)),
  ``question_superlative`` (cheapest, highest, most...);
- the agent's SQL, where it searched: ``sql_conditions`` (its WHERE conditions, log(1 + n)), ``sql_grounded``
  (share of its literals the question names), ``sql_missed`` (share of the values the question names that the
  SQL leaves out), ``sql_condition_sim`` (mean over conditions of the cosine of ``column value`` and the
  question), ``sql_order_mismatch`` (a superlative question without ORDER BY, or the reverse);
- the memory: ``memory_top_sim`` (the question against the nearest past question) and ``memory_agrees``
  (+1 / -1 when that question's yes/no answer, given by a person, says the same / the other as a yes/no
  answer, 0 otherwise).

Nothing here reads a dataset annotation (question type, gold answer, gold SQL): only what the deployed
agent's context and its proposal show. Keys are ``evidence:<name>`` among a PRM's signal keys
(``prm.inputs.signals``), so a logged row (``prm train`` / ``prm score``) and a live decision
(``prm.scoring.scorer``) are read by the same function.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import polars as pl

from prm.inputs.visible import _details, _question, _session, _words

EVIDENCE_PREFIX = "evidence:"
"""Prefix of the keys that name evidence features among a PRM's signal keys (``prm.inputs.signals``)."""
NAMES = (
    "detail_top_sim", "detail_margin", "detail_top_yesno", "detail_top_agrees", "detail_weighted_agrees",
    "title_sim", "question_values", "question_superlative",
    "sql_conditions", "sql_grounded", "sql_missed", "sql_condition_sim", "sql_order_mismatch",
    "memory_top_sim", "memory_agrees",
)
KEYS = tuple(EVIDENCE_PREFIX + name for name in NAMES)

Encode = Callable[[list[str]], np.ndarray]
"""Texts -> unit vectors, one row each (the sentence encoder)."""

_SEARCH, _PREDICT = "[SearchProduct]", "[PredictAnswer]"
_COLUMN = re.compile(r'^("?)([^"]+?)\1 (?:TEXT|REAL|INTEGER)\b(?: -- values: (.*))?$')
_CONDITION = re.compile(r"""("[^"]+"|`[^`]+`|\w+)\s*(=|!=|<>|<=|>=|<|>|LIKE|NOT LIKE)\s*('(?:[^']|'')*'|[\d.]+)""",
                        re.IGNORECASE)
_IN_LIST = re.compile(r"""("[^"]+"|`[^`]+`|\w+)\s+(?:NOT\s+)?IN\s*\(([^)]*)\)""", re.IGNORECASE)
_SUPERLATIVE = re.compile(r"\b(cheapest|least expensive|most expensive|highest|lowest|largest|smallest|biggest|"
                          r"best|top|most|least|maximum|minimum|max|min|longest|shortest|lightest|heaviest)\b",
                          re.IGNORECASE)
_MEMORY_PAIR = re.compile(r"(?:^|\| )Q: (.*?) A: (.*?)(?= \| Q: |$)")
_SOFTMAX_TEMPERATURE = 0.05
"""Cosine differences of a few hundredths separate the matching detail from the rest: a sharp softmax."""


def _schema_values(state_text: str) -> list[str]:
    """The values the table's schema lists (``col TEXT -- values: a, b, ...``), lower case, ``...`` dropped."""
    values = []
    for line in (state_text or "").split("\n"):
        found = _COLUMN.match(line.strip())
        if found and found.group(3):
            values += [v.strip().lower() for v in found.group(3).split(",") if v.strip() not in ("", "...")]
    return list(dict.fromkeys(values))


def _named_in(text: str, value: str) -> bool:
    """``value`` appears in ``text`` as whole words (case-insensitive)."""
    return bool(value) and re.search(r"(?<![a-z0-9])" + re.escape(value) + r"(?![a-z0-9])", text) is not None


def _sql(proposal_text: str) -> str | None:
    lines = [line.strip() for line in (proposal_text or "").split("\n")]
    found = [line[len(_SEARCH):].strip() for line in lines if line.startswith(_SEARCH)]
    return found[-1] if found else None


def _conditions(sql: str) -> list[tuple[str, str]]:
    """``(column, literal)`` of the SQL's WHERE conditions (``IN`` lists give one pair per literal)."""
    where = re.split(r"\bWHERE\b", sql, maxsplit=1, flags=re.IGNORECASE)
    if len(where) < 2:
        return []
    body = re.split(r"\b(?:ORDER\s+BY|LIMIT|GROUP\s+BY)\b", where[1], maxsplit=1, flags=re.IGNORECASE)[0]
    pairs = [(c.strip('"`'), v.strip("'").replace("''", "'")) for c, _, v in _CONDITION.findall(body)]
    for column, items in _IN_LIST.findall(body):
        pairs += [(column.strip('"`'), item.strip().strip("'")) for item in items.split(",") if item.strip()]
    return pairs


def _yes_no(answer: str) -> str | None:
    said = answer.strip().lower().rstrip(".!")
    return said if said in ("yes", "no") else None


def _answer(proposal_text: str) -> str | None:
    lines = [line.strip() for line in (proposal_text or "").split("\n")]
    found = [line[len(_PREDICT):].strip() for line in lines if line.startswith(_PREDICT)]
    return found[-1] if found else None


def _memory_pairs(session: list[str]) -> list[tuple[str, str]]:
    line = next((x for x in session if x.startswith("History:")), "")
    history = line[len("History:"):].strip()
    return [] if history in ("", "none") else _MEMORY_PAIR.findall(history)


def _memory_yes_no(answer: str) -> str | None:
    """A person's answer as yes / no: its first word, when that is one."""
    first = re.match(r"\W*(yes|no)\b", answer.strip().lower())
    return first.group(1) if first else None


def evidence_features(state_text: str, proposal_text: str, encode: Encode) -> dict[str, float]:
    """The ``evidence:`` features of one decision point (module docstring), unprefixed."""
    out = dict.fromkeys(NAMES, 0.0)
    session = _session(state_text)
    question = _question(session)
    if not question:
        return out
    asked = question.lower()
    answer = _answer(proposal_text)
    said = _yes_no(answer) if answer is not None else None
    details = _details(session)
    product = next((x for x in session[1:] if x.startswith("Product ")), "")
    title = product.split(": ", 1)[1].split(" (")[0] if ": " in product else ""
    pairs = _memory_pairs(session)
    sql = _sql(proposal_text)
    conditions = _conditions(sql) if sql else []
    texts = [question] + [f"{n}: {v}" for n, v in details] + ([title] if title else []) \
        + [q for q, _ in pairs] + [f"{c} {v}" for c, v in conditions]
    vectors = encode(texts)
    q, rest = vectors[0], vectors[1:]
    d = rest[:len(details)]
    rest = rest[len(details):]
    if title:
        out["title_sim"] = float(rest[0] @ q)
        rest = rest[1:]
    m, c = rest[:len(pairs)], rest[len(pairs):]
    if len(details):
        sims = d @ q
        order = np.argsort(-sims, kind="stable")
        top = details[order[0]][1].lower()
        out["detail_top_sim"] = float(sims[order[0]])
        out["detail_margin"] = float(sims[order[0]] - sims[order[1]]) if len(order) > 1 else float(sims[order[0]])
        out["detail_top_yesno"] = float(top in ("yes", "no"))
        if said and top in ("yes", "no"):
            out["detail_top_agrees"] = 1.0 if top == said else -1.0
        flags = [(s, v.lower()) for s, (_, v) in zip(sims, details) if v.lower() in ("yes", "no")]
        if said and flags:
            weights = np.exp((np.array([s for s, _ in flags]) - max(s for s, _ in flags)) / _SOFTMAX_TEMPERATURE)
            signs = np.array([1.0 if v == said else -1.0 for _, v in flags])
            out["detail_weighted_agrees"] = float((weights * signs).sum() / weights.sum())
    superlative = _SUPERLATIVE.search(question) is not None
    out["question_superlative"] = float(superlative)
    named = [v for v in _schema_values(state_text) if _named_in(asked, v)]
    out["question_values"] = math.log1p(len(named))
    if sql is not None:
        literals = [v.lower() for _, v in conditions]
        out["sql_conditions"] = math.log1p(len(conditions))
        if literals:
            out["sql_grounded"] = sum(_named_in(asked, v) or bool(_words(v) & _words(asked)) for v in literals) \
                / len(literals)
            out["sql_condition_sim"] = float((c @ q).mean())
        if named:
            out["sql_missed"] = sum(not any(v == lit for lit in literals) for v in named) / len(named)
        ordered = re.search(r"\bORDER\s+BY\b", sql, re.IGNORECASE) is not None
        out["sql_order_mismatch"] = float(ordered != superlative)
    if len(pairs):
        sims = m @ q
        best = int(np.argmax(sims))
        out["memory_top_sim"] = float(sims[best])
        past = _memory_yes_no(pairs[best][1])
        if said and past:
            out["memory_agrees"] = 1.0 if past == said else -1.0
    return out


@lru_cache(maxsize=1)
def embedded_encoder() -> Encode:
    """The embedded all-MiniLM-L6-v2, one per process (its text cache is shared by every caller)."""
    from agile.executor.memory import Embedder

    return Embedder().encode


QUESTION_VECTOR_WIDTH = 384
"""Width of all-MiniLM-L6-v2's sentence vectors (``PRMSettings.question_vector`` of a PRM that reads them)."""


def focus_text(state_text: str) -> str:
    """What a decision point asks: the current question (after the state's last ``[GetQuestion]``), else the
    state's last non-empty line (an environment without questions: its latest observation)."""
    question = _question(_session(state_text))
    if question:
        return question
    lines = [line.strip() for line in (state_text or "").split("\n") if line.strip()]
    return lines[-1] if lines else ""


def question_vectors(states: list[str], encode: Encode | None = None) -> np.ndarray:
    """The sentence encoder's unit vector of each state's ``focus_text``: ``[len(states), 384]`` float32. Questions
    phrased alike across products (a colour that matches its photo, a fit that runs small) share a direction,
    so a head can learn which kinds of question the agent gets wrong in groups it never saw."""
    encode = encode or embedded_encoder()
    if not states:
        return np.zeros((0, QUESTION_VECTOR_WIDTH), dtype=np.float32)
    return np.asarray(encode([focus_text(s) for s in states]), dtype=np.float32)


def evidence_inputs(state_text: str, proposal_text: str, encode: Encode | None = None) -> dict[str, float]:
    """``evidence_features`` under the ``evidence:`` keys a PRM reads them by."""
    found = evidence_features(state_text, proposal_text, encode or embedded_encoder())
    return {EVIDENCE_PREFIX + name: value for name, value in found.items()}


def frame_evidence_features(frame: pl.DataFrame, encode: Encode | None = None,
                            progress: bool = False) -> list[dict[str, float]]:
    """Every row's ``evidence:`` features, in row order (needs ``state_text`` and ``proposal_text``)."""
    missing = [c for c in ("state_text", "proposal_text") if c not in frame.columns]
    if missing:
        raise ValueError(f"evidence features read the columns state_text and proposal_text; the data lacks "
                         f"{missing} (collect with --decide-after proposal).")
    encode = encode or embedded_encoder()
    rows: Sequence = zip(frame["state_text"].to_list(), frame["proposal_text"].to_list())
    if progress:
        from tqdm import tqdm

        rows = tqdm(list(rows), desc="evidence", unit="row")
    return [evidence_inputs(s, p, encode) for s, p in rows]
