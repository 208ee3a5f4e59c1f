"""AGILE's evaluation metrics: accuracy, advice rate and total score (the one home of the formula).

- **accuracy**: share of questions answered correctly (an answer taken from advice counts as
  correct, as in AGILE: the human expert is right);
- **advice rate**: share of questions on which advice was sought;
- **total score** = accuracy - c * advice rate, with c the cost of one piece of advice
  (AGILE's default c = 0.3).

The per-question reward used for training is the same quantity for one question:
``1[correct] - c * 1[advised]``, so the mean reward of a run equals its total score.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_ADVICE_COST = 0.3


def accuracy(correct: Sequence[bool]) -> float:
    """Share of True in ``correct``; 0.0 for no questions."""
    return float(sum(bool(x) for x in correct)) / len(correct) if len(correct) else 0.0


def advice_rate(advised: Sequence[bool]) -> float:
    """Share of questions on which advice was sought; 0.0 for no questions."""
    return float(sum(bool(x) for x in advised)) / len(advised) if len(advised) else 0.0


def total_score(acc: float, rate: float, advice_cost: float = DEFAULT_ADVICE_COST) -> float:
    """AGILE's total score: accuracy - c * advice rate."""
    if advice_cost < 0:
        raise ValueError(f"advice_cost must be >= 0, got {advice_cost}")
    return acc - advice_cost * rate


def question_reward(correct: bool, advised: bool, advice_cost: float = DEFAULT_ADVICE_COST) -> float:
    """The reward of one question: 1 when correct, minus c when advice was sought."""
    return float(bool(correct)) - advice_cost * float(bool(advised))


def summarize(correct: Sequence[bool], advised: Sequence[bool],
              advice_cost: float = DEFAULT_ADVICE_COST) -> dict[str, float]:
    """``{"n", "accuracy", "advice_rate", "total_score"}`` of one run (or one group)."""
    if len(correct) != len(advised):
        raise ValueError(f"correct has {len(correct)} entries but advised has {len(advised)}; "
                         "pass one flag of each per question.")
    acc, rate = accuracy(correct), advice_rate(advised)
    return {"n": float(len(correct)), "accuracy": acc, "advice_rate": rate,
            "total_score": total_score(acc, rate, advice_cost)}


def average(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Unweighted mean of per-group summaries (AGILE averages groups, not questions)."""
    if not rows:
        return {"n": 0.0, "accuracy": 0.0, "advice_rate": 0.0, "total_score": 0.0}
    keys = ("accuracy", "advice_rate", "total_score")
    out = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    out["n"] = float(sum(r["n"] for r in rows))
    return out
