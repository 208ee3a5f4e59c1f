"""The statistics of a success guarantee: an exact binomial test per member of an ordered family of gates,
tested in a fixed sequence (Learn-then-Test), and the guarantee record a helper folder keeps.

    from helper.gates.certify import certify
    result = certify(outcomes, eps=0.1, delta=0.1)   # outcomes: (members, episodes) of 0/1, most help first
    result.chosen                                    # index of the cheapest certified member, or None

The family is ordered from most to least help (the solved helpers at C = Cmax, ..., 1, 0; or thresholds on a
score from high to low). For each member, H0: its success is below the target 1 - eps; its p-value is the exact
binomial tail P(X >= k | n, 1 - eps) of its k successes on the n calibration episodes (scipy's ``binom.sf``, no
normal approximation). The members are tested in order at level delta and the test stops at the first that fails;
the chosen member is the last one that passed. Fixed-sequence testing controls the family-wise error at delta with
no correction, because a later hypothesis is only tested once every earlier one was rejected (Bauer 1991; Angelopoulos
et al. 2021, Learn then Test). So, with probability at least 1 - delta over the draw of the calibration episodes,
the chosen member's success on fresh episodes from the same distribution is at least 1 - eps.

The highest target the family can certify is the first member's one-sided Clopper-Pearson lower bound at delta:
every later member is tested only after the first passes, and the first passes exactly the targets at or below it.

Pure numpy / scipy and json: no model, no environment.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

GUARANTEE_FILE = "guarantee.json"
KIND = "helpgate.guarantee"


def binomial_p_value(successes: int, n: int, target: float) -> float:
    """Exact one-sided p-value of H0 "success < target" given ``successes`` of ``n``: P(X >= successes), X ~ Bin(n,
    target) (the largest tail any success below the target gives)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"successes={successes}, n={n}: need 0 <= successes <= n and n >= 1.")
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target={target}: a success probability lies in [0, 1].")
    return float(stats.binom.sf(int(successes) - 1, int(n), float(target)))


def lower_bound(successes: int, n: int, delta: float) -> float:
    """The one-sided Clopper-Pearson lower bound at level ``delta``: the largest target whose p-value is <= delta."""
    if successes <= 0:
        return 0.0
    return float(stats.beta.ppf(delta, successes, n - successes + 1))


def fixed_sequence(p_values, delta: float) -> int:
    """How many leading hypotheses the fixed-sequence test rejects: it stops at the first p-value above ``delta``."""
    passed = 0
    for p in p_values:
        if p > delta:
            break
        passed += 1
    return passed


@dataclass
class Certification:
    """What ``certify`` found: the chosen member (None: the target is out of reach) and each tested member's numbers."""

    chosen: int | None
    """Index of the cheapest certified member in the family's order (the last that passed), or None."""
    p_values: list[float]
    """Each member's p-value, in the family's order (members after the first failure are shown but not tested)."""
    tested: int
    """Members tested: those that passed and the first that failed."""
    highest: float
    """The highest target success this calibration can certify (the first member's lower bound)."""


def check_levels(eps: float, delta: float) -> None:
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps={eps}: the allowed failure rate lies strictly between 0 and 1 (e.g. --eps 0.1 for a "
                         "target success of 0.9).")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta={delta}: the allowed chance that the guarantee is wrong lies strictly between 0 and "
                         "1 (e.g. --delta 0.1 for 90% confidence).")


def certify(outcomes, eps: float, delta: float) -> Certification:
    """Fixed-sequence exact binomial tests of ``outcomes`` ((members, episodes) of 0/1, most help first)."""
    check_levels(eps, delta)
    outcomes = np.asarray(outcomes)
    if outcomes.ndim != 2 or outcomes.shape[0] < 1 or outcomes.shape[1] < 1:
        raise ValueError(f"outcomes of shape {outcomes.shape}: give (members, episodes), at least one of each.")
    if not np.isin(outcomes, (0, 1)).all():
        raise ValueError("outcomes: each episode's success must be 0 or 1 for an exact binomial test.")
    n = outcomes.shape[1]
    successes = outcomes.sum(axis=1).astype(int)
    p_values = [binomial_p_value(k, n, 1.0 - eps) for k in successes]
    passed = fixed_sequence(p_values, delta)
    return Certification(chosen=passed - 1 if passed else None, p_values=p_values,
                         tested=min(passed + 1, len(p_values)), highest=lower_bound(int(successes[0]), n, delta))


def chosen_index(successes, n: int, eps: float, delta: float) -> int | None:
    """``certify``'s choice from success counts alone (members, most help first): the validity benchmark's inner loop."""
    passed = fixed_sequence([binomial_p_value(int(k), n, 1.0 - eps) for k in successes], delta)
    return passed - 1 if passed else None


def fingerprint(rows) -> str:
    """``sha256:<hex>`` of the calibration data (JSON-able rows: episode ids, members, outcomes, spend)."""
    text = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


HELPER_FILES = ("helper.json", "classifier", "fallback", "policy.npz", "discretizer.json", "members",
                "tiered_policy.npz")
"""The files of a helper folder that decide its gates (not its guarantee, calibration or provenance)."""


def helper_fingerprint(directory: str | Path) -> str:
    """``sha256:<hex>`` over the helper folder's deciding files: a guarantee holds only for the helper it measured."""
    directory = Path(directory)
    digest = hashlib.sha256()
    for name in HELPER_FILES:
        path = directory / name
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(file.relative_to(directory).as_posix().encode() + b"\0" + file.read_bytes())
    return "sha256:" + digest.hexdigest()


NUMBERS = ("eps", "delta", "target", "n")
MEMBER_NUMBERS = ("budget", "success", "interventions")
"""What every reader of a guarantee shows: a record without one of them is refused naming it."""


def read_guarantee(directory: str | Path) -> dict | None:
    """The guarantee a helper folder holds (``guarantee.json``), or None where it has none; a file that is cut
    short, of another kind or without a field its readers show is refused in one line naming the file."""
    from trajectories.files import read_json_object

    path = Path(directory) / GUARANTEE_FILE
    if not path.is_file():
        return None
    record = read_json_object(path, "helpgate calibrate", "re-run `helpgate calibrate`")
    kind = record.get("kind")
    if kind != KIND:
        raise ValueError(f"{path}: not a helpgate guarantee (kind={kind!r}); re-run `helpgate calibrate`.")
    member = record.get("member")
    lacking = [k for k in NUMBERS if not _number(record.get(k))] + ([] if isinstance(member, dict) else ["member"])
    lacking += [f"member.{k}" for k in MEMBER_NUMBERS if isinstance(member, dict) and not _number(member.get(k))]
    if lacking:
        raise ValueError(f"{path}: no valid {', '.join(lacking)} (a file cut short or edited); re-run "
                         "`helpgate calibrate`.")
    return record


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def on_fallback(record: dict) -> str | None:
    """Why the guarantee's helper decided on its fallback classifier (its PRM missing or not its own), or None: it
    holds for the gate that decides the same way only (``HelperGate.load`` compares)."""
    return record.get("fallback")


def member_name(member: dict) -> str:
    """A family member in words: ``C=2`` (budget family), ``C=3, price 0.05`` (priced family) or ``B=4`` (a tiered
    helper's cost budget)."""
    if member.get("family", "budget") == "priced":
        return f"C={member['budget']}, price {member['price']:.4g}"
    if member.get("family") == "tiered":
        return f"B={member['budget']:g}"
    return f"C={member['budget']}"


def tiered_spend(member: dict) -> str:
    """A tiered member's spend in words: ``cost 2.31 an episode (calls: compute 1.10, stronger 0.52, human 0.03)``."""
    calls = ", ".join(f"{kind} {mean:.2f}" for kind, mean in (member.get("calls") or {}).items())
    return f"cost {member['cost']:.2f} an episode (calls: {calls})"


def describe(record: dict) -> str:
    """One line: what the guarantee promises."""
    member = record["member"]
    family = member.get("family", "budget")
    spent = f"{member['interventions']:.2f} interventions an episode"
    if family == "tiered":
        kinds = ", ".join(f"{kind} at {price:g}" for kind, price in (record.get("kinds") or {}).items())
        caps = ", ".join(f"{kind} {cap}" for kind, cap in (record.get("caps") or {}).items())
        where = f"cost budget B = {member['budget']:g} ({kinds}{f'; caps {caps}' if caps else ''})"
        spent = tiered_spend(member) if "cost" in member else spent
    elif family == "budget":
        where = f"budget C = {member['budget']}"
    else:
        where = (f"budget C = {member['budget']} with price {member['price']:.4g} per intervention (the table "
                 f"{member.get('policy_file', '?')})")
    fallback = f"; on its fallback classifier, no PRM ({record['fallback']})" if record.get("fallback") else ""
    return (f"success >= {record['target']:g} with confidence {1 - record['delta']:g} at {where} "
            f"(calibrated on {record['n']} episodes: success {member['success']:.3f}, {spent}{fallback})")
