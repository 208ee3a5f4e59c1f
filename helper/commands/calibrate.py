"""``helpgate calibrate``: the cheapest budget of a helper that certifies a target success on held-out episodes.

    helpgate calibrate --helper runs/demo/helper --eps 0.1 --delta 0.1 --episodes 300 --seed 2000 \\
        --agent simulator          # the environment and its actors: the same flags as evaluate's

The family is the solved helper at C = Cmax, ..., 1, 0 (``HelperGate.load(dir, budget=C)``: most help first). Each
member plays the same ``--episodes`` calibration episodes (its own rollouts: its interventions change the
trajectories), and ``helper.gates.certify`` tests them in that order with an exact one-sided binomial test at
``--delta`` against the target success 1 - ``--eps``, stopping at the first failure. The last member that passed
is the cheapest certified one: with probability at least 1 - delta over the calibration draw, its success on fresh
episodes from the same distribution is at least 1 - eps.

``--family priced`` tests the helper's efficient frontier instead: its own solve re-estimated and solved with a price
on each intervention under the budget Cmax (the largest of ``--budgets``), from price 0 (the C = Cmax table) up to
the price that stops every intervention (``helper.solve.priced_family``; members played by the solved table on the
PRM score). The budget family spends all of each C, low-gain interventions included, and jumps between budgets; the
priced members keep only the interventions worth their price, so the cheapest certified one spends less for the same
target. Both orders are fixed by the helper folder alone, before any calibration episode is played, which the
fixed-sequence test needs. The certified priced table is kept in ``calibration/priced_policy.npz`` (its hash in the
guarantee); ``helper.solve.priced_family.certified_gate(dir)`` loads the gate a guarantee covers, of any family.

A tiered helper folder (several kinds of help, each at its price: ``helpgate solve --help-kinds`` then ``distill``) has
its own family (``helper.solve.tiered_family``): the helper at each cost budget its solved table holds, B = its
``cost_budget`` down to 0 in the table's cost unit (``--budgets`` picks some of them), most help first. Each member
plays the calibration episodes with the folder's kinds at their prices and caps (``run_episodes(..., helps=...,
budget=B)``), the same fixed-sequence test picks the cheapest certified B, and the guarantee records its mean cost
and calls per kind an episode besides its success. ``--family priced`` is refused on it: its prices are its kinds'.

An outcome counts as a success when it reaches ``--success-at`` (1.0: every question of a ProductQA session right;
TextWorld and plug-ins score 0 or 1).

The calibration episodes must be new to the helper: they are refused when an episode id appears in the rows the
helper was solved and distilled from (``helper.json`` ``labels_from``) or its PRM was trained on (the PRM's
``data``), or was played by the run's sweep or evaluation (``episodes.csv`` beside the helper folder), or when an
episode's group (ProductQA group, TextWorld game, a plug-in's task) is one the training rows hold. The pipeline
collects the train split with ``--seed S`` and sweeps the test split with S + 1000; the default here, the test split
with seed 2000, is disjoint from both for S < 1000.

A helper whose PRM is missing, broken or not the one it was distilled with is refused in one line: its decisions
would fall back to the classifier without the PRM score, and a guarantee of that gate is none of the helper's.
``--allow-fallback`` certifies the fallback anyway and records why in ``guarantee.json`` (``fallback``);
``HelperGate.load`` then shows the guarantee only on a gate that decides on its fallback too, never on the
PRM-scored helper once its PRM is back (and a guarantee certified with the PRM never on a gate without it).

Writes into the helper folder ``guarantee.json`` (eps, delta, n, the chosen member's budget, calibration success and
spend, every tested member's p-value, a fingerprint of the calibration data and of the helper's files; a tiered
member also its mean ``cost`` and ``calls`` per kind an episode) and ``calibration/episodes.csv`` (one row per
member and episode; tiered: with its ``cost`` and ``calls_<kind>``). ``HelperGate.load`` exposes it as
``gate.guarantee`` (a tiered folder's too) and ``serve-gate``'s ``/health`` shows it. A target out of reach is
refused in one line naming the highest success this calibration can certify; nothing is written then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from helper.data.environment import EnvConfig, Environment
from helper.gates import certify
from helper.stored_config import flat
from trajectories.files import write_json_atomic

FAMILIES = ("budget", "priced")
NEIGHBOUR_PLAYS = ("sweep", "evaluate")
"""Folders beside the helper folder whose ``episodes.csv`` lists episodes the run already played (pipeline layout)."""


@dataclass
class CalibrateConfig(EnvConfig):
    helper: str = "runs/default/helper"
    """Helper folder written by `helpgate distill`; guarantee.json is written into it."""
    eps: float = 0.1
    """Allowed failure rate: the target success is 1 - eps."""
    delta: float = 0.1
    """Allowed chance that the guarantee is wrong: it holds with confidence 1 - delta."""
    episodes: int = 300
    """Calibration episodes (n); every member plays the same ones."""
    seed: int = 2000
    """Seed of the calibration episodes (the pipeline collects with its seed S and sweeps with S + 1000)."""
    budgets: list[int] | None = None
    """Budgets C of the family, tested from the largest down (default: the helper's solved budget down to 0; a
    tiered helper: cost budgets its table holds, default all of them from its cost_budget down to 0)."""
    success_at: float = 1.0
    """An episode counts as a success when its outcome reaches this (outcomes lie in [0, 1])."""
    backend: str | None = None
    """Override the helper's backend (features, text, or table: the solved table itself)."""
    family: str = "budget"
    """budget (the helper at C = Cmax, ..., 0; a tiered helper at each cost budget B its table holds) or priced (its
    solved table with a price per intervention under the budget Cmax, from price 0 up: its efficient frontier,
    helper.solve.priced_family; not for a tiered helper)."""
    prices: int = 21
    """priced: prices tried from 0 to the one that stops every intervention (equal policies are one member)."""
    allow_fallback: bool = False
    """Certify a helper whose PRM is missing, broken or not its own on its fallback classifier (guarantee.json says
    so, and it then covers only a gate that decides the same way, not the PRM-scored helper)."""


def family(cfg: CalibrateConfig, solved_budget: int | None) -> list[int]:
    """The budgets of the family, most help first."""
    if cfg.budgets is not None:
        budgets = sorted({int(c) for c in cfg.budgets}, reverse=True)
        if not budgets or budgets[-1] < 0:
            raise ValueError(f"budgets={cfg.budgets}: give one or more budgets >= 0, e.g. --budgets 3 2 1 0.")
        return budgets
    if solved_budget is None:
        raise ValueError(f"{cfg.helper}/helper.json records no solved_budget: pass --budgets, e.g. --budgets 3 2 1 0.")
    return list(range(int(solved_budget), -1, -1))


def check(cfg: CalibrateConfig) -> None:
    certify.check_levels(cfg.eps, cfg.delta)
    if cfg.episodes < 1:
        raise ValueError(f"episodes={cfg.episodes}: calibrate on at least 1 episode (a few hundred certify more).")
    if not 0.0 < cfg.success_at <= 1.0:
        raise ValueError(f"success_at={cfg.success_at}: give the outcome an episode must reach, in (0, 1].")
    if cfg.family not in FAMILIES:
        raise ValueError(f"family={cfg.family!r}: choose one of {', '.join(FAMILIES)}.")
    if cfg.prices < 2:
        raise ValueError(f"prices={cfg.prices}: try at least 2 prices (0 and the one that stops every intervention).")


def seen_episodes(helper_dir: Path) -> dict[str, tuple[set[str], set[str]]]:
    """``{where: (episode ids, groups)}`` of every episode the helper's training or its run's evaluation used."""
    import json

    from helper.gates.helper_gate import CONFIG_FILE, resolve_recorded

    config = json.loads((helper_dir / CONFIG_FILE).read_text())
    found: dict[str, tuple[set[str], set[str]]] = {}
    labels = resolve_recorded(helper_dir, config, "labels_from")
    sources = []
    if labels and (Path(labels) / "labels.parquet").is_file():
        sources.append(("the helper's solve and distill rows", [Path(labels) / "labels.parquet"]))
    prm = resolve_recorded(helper_dir, config, "prm")
    prm_config = Path(prm) / "prm_config.json" if prm else None
    if prm_config is not None and prm_config.is_file():
        data = json.loads(prm_config.read_text()).get("config", {}).get("data")
        if data and Path(data).is_dir():
            sources.append(("the PRM's training rows", sorted(Path(data).rglob("*.parquet"))))
    for where, paths in sources:
        paths = [p for p in paths if not any(part.startswith((".", "_")) for part in p.parts[-1:])]
        if paths:
            rows = pl.concat([pl.read_parquet(p, columns=["episode_id", "task_id"]) for p in paths]).unique()
            groups = {str(t).split("/", 1)[0] for t in rows["task_id"].to_list()}
            found[where] = (set(rows["episode_id"].to_list()), groups)
    for name in NEIGHBOUR_PLAYS:
        played = helper_dir.parent / name / "episodes.csv"
        if played.is_file():
            found[f"{played}"] = (set(pd.read_csv(played, usecols=["episode_id"])["episode_id"].astype(str)), set())
    return found


def episode_groups(episodes) -> list[str]:
    """Each fresh episode's group, as ``helper.evaluation.play.episode_group`` names it, before it is played."""
    out = []
    for episode in episodes:
        own = getattr(episode, "group", None)
        out.append(own if isinstance(own, str) else str(episode.observe().task_id).split("/", 1)[0])
    return out


def check_disjoint(cfg: CalibrateConfig, env: Environment, helper_dir: Path) -> None:
    """Refuse calibration episodes the helper, its PRM or its run's evaluation already used (module docstring)."""
    episodes = env.episodes()
    ids = {e.episode_id for e in episodes}
    groups = set(episode_groups(env.episodes()))
    for where, (seen_ids, seen_groups) in seen_episodes(helper_dir).items():
        same = sorted(ids & seen_ids)
        if same:
            raise ValueError(f"calibration episodes (split {cfg.split}, seed {cfg.seed}) include {len(same)} "
                             f"episode(s) of {where}, e.g. {same[0]!r}; pick a --seed whose episodes the run has not played.")
        shared = sorted(groups & seen_groups)
        if shared:
            raise ValueError(f"calibration episodes (split {cfg.split}, seed {cfg.seed}) play group(s) of {where}, "
                             f"e.g. {shared[0]!r}; calibrate on held-out groups (--split test).")


def tiered_folder(cfg: CalibrateConfig, helper_dir: Path) -> bool:
    """Whether the helper folder is a tiered helper's (several kinds, each at its price); a tiered folder given
    ``--family priced`` is refused in one line (its prices are its kinds', there is no price to sweep)."""
    import json

    from helper.gates.helper_gate import CONFIG_FILE
    from helper.solve.tiered_family import is_tiered

    try:
        config = json.loads((helper_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False  # HelperGate.load refuses it, naming the file
    tiered = isinstance(config, dict) and is_tiered(config)
    if tiered and cfg.family == "priced":
        raise ValueError(f"family=priced: {helper_dir} is a tiered helper (kinds {config.get('kinds')}, each at its "
                         "price), which has no priced family; use the default family (drop --family priced, or "
                         "--family budget): the helper at each cost budget its table holds.")
    return tiered


def members_of(cfg: CalibrateConfig, helper, helper_dir: Path) -> list[dict]:
    """The family, most help first: each member's description and a builder of its gate (fixed by the helper folder
    alone, before any calibration episode is played)."""
    from helper.gates.tiered_helper_gate import TieredHelperGate

    if isinstance(helper, TieredHelperGate):
        from helper.solve import tiered_family

        return [{"family": tiered_family.FAMILY, "budget": b, "build": (lambda b=b: helper.with_budget(b))}
                for b in tiered_family.budgets(helper, cfg.budgets)]
    budgets = family(cfg, helper.solved_budget)
    if cfg.family == "budget":
        return [{"family": "budget", "budget": int(c), "build": (lambda c=c: helper.with_budget(c))} for c in budgets]
    from helper.solve import priced_family

    cap = budgets[0]
    tables, discretizer = priced_family.priced_members(helper_dir, cap, cfg.prices)
    return [{"family": "priced", "budget": int(cap), "price": price, "table": table, "discretizer": discretizer,
             "build": (lambda t=table, p=price: priced_family.member_gate(helper, t, discretizer, cap, p))}
            for price, table in tables]


def rollouts(cfg: CalibrateConfig, env: Environment, members: list[dict], helps=None) -> pd.DataFrame:
    """One row per member and calibration episode: member index, budget, episode id, outcome, interventions (a
    tiered member, played with ``helps``: also its cost and calls per kind)."""
    from helper.evaluation.play import evaluate_gate

    if helps is not None:
        return tiered_rollouts(cfg, env, members, helps)
    frames = []
    for index, member in enumerate(members):
        _, per_episode, _ = evaluate_gate(env, lambda _c, m=member: m["build"](), [member["budget"]],
                                          "helper" if member["family"] == "budget" else "priced", ci_resamples=200)
        frames.append(pd.DataFrame(per_episode)[["budget", "episode_id", "success", "interventions"]]
                      .assign(member=index))
    frame = pd.concat(frames, ignore_index=True)[["member", "budget", "episode_id", "success", "interventions"]]
    frame["success"] = frame["success"].astype(float)
    return frame


def tiered_rollouts(cfg: CalibrateConfig, env: Environment, members: list[dict], helps) -> pd.DataFrame:
    """``rollouts`` of the tiered family: each member the same episodes, with the folder's kinds, at its cost budget."""
    from helper.solve.tiered_family import play

    frames = []
    for index, member in enumerate(members):
        started = time.perf_counter()
        rows = pd.DataFrame(play(env.episodes(), env.base, helps, member["build"](), member["budget"], cfg.seed))
        frames.append(rows.assign(member=index, budget=member["budget"]))
        calls = "  ".join(f"{h.name} {rows['calls_' + h.name].mean():.2f}" for h in helps)
        print(f"{'helper':>14s}  B={member['budget']:<4g} success {rows['success'].mean():.3f}  cost "
              f"{rows['cost'].mean():.2f}  calls {calls}  ({time.perf_counter() - started:.1f}s)")
    frame = pd.concat(frames, ignore_index=True)
    first = ["member", "budget", "episode_id", "success", "interventions", "cost"]
    frame = frame[first + [c for c in frame.columns if c not in first]]
    frame["success"] = frame["success"].astype(float)
    return frame


def guarantee(cfg: CalibrateConfig, frame: pd.DataFrame, members: list[dict], helper_dir: Path) -> dict:
    """The guarantee record of a calibration (raises the one-line refusal when the target is out of reach)."""
    ids = sorted(frame["episode_id"].unique())
    rows_of = [frame[frame["member"] == i].set_index("episode_id").loc[ids] for i in range(len(members))]
    outcomes = np.stack([(rows["success"].to_numpy() >= cfg.success_at - 1e-12).astype(int) for rows in rows_of])
    spend = [float(rows["interventions"].mean()) for rows in rows_of]
    result = certify.certify(outcomes, cfg.eps, cfg.delta)
    n, target = len(ids), 1.0 - cfg.eps
    described = [{"family": m["family"], "budget": budget_number(m["budget"])}
                 | ({"price": m["price"]} if "price" in m else {}) for m in members]
    records = [d | {"successes": int(outcomes[i].sum()), "success": float(outcomes[i].mean()),
                    "interventions": spend[i]} | tiered_spend(rows_of[i])
               | {"p_value": result.p_values[i], "tested": i < result.tested,
                  "passed": result.chosen is not None and i <= result.chosen} for i, d in enumerate(described)]
    if result.chosen is None:
        top = records[0]
        raise ValueError(f"target success {target:g} (eps {cfg.eps:g}) cannot be certified at delta {cfg.delta:g} on "
                         f"{n} episodes: the most-help member, {certify.member_name(top)}, succeeded on "
                         f"{top['successes']} of {n}; the highest success this calibration can certify is "
                         f"{result.highest:.3f}. Pass --eps {1 - result.highest:.3f} or more, or calibrate on more "
                         "episodes.")
    rows = frame.assign(outcome=frame["success"] >= cfg.success_at - 1e-12).to_dict("records")
    return {"kind": certify.KIND, "eps": cfg.eps, "delta": cfg.delta, "target": target, "n": n,
            "success_at": cfg.success_at, "family": cfg.family, "member": records[result.chosen], "members": records,
            "highest_certifiable": result.highest,
            "calibration": {"split": cfg.split, "seed": cfg.seed, "episodes": cfg.episodes,
                            "agent_seed": cfg.agent_seed, "spec": flat(cfg.spec)},
            "data_fingerprint": certify.fingerprint(rows),
            "helper_fingerprint": certify.helper_fingerprint(helper_dir),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def budget_number(budget) -> int | float:
    """A member's budget as the guarantee records it: a whole number as an int (a tiered cost budget may be 1.5)."""
    value = float(budget)
    return int(value) if value.is_integer() else value


def tiered_spend(rows: pd.DataFrame) -> dict:
    """A tiered member's mean cost and calls per kind an episode (``{}`` for a one-kind member)."""
    if "cost" not in rows.columns:
        return {}
    from helper.solve.tiered_family import spend_of

    return spend_of(rows)


def load_helper(cfg: CalibrateConfig):
    """``(helper, why it decides on its fallback classifier or None)``: a helper whose PRM is missing, broken or not
    its own is refused unless ``--allow-fallback`` (a guarantee of the fallback is no guarantee of the helper)."""
    from helper.gates.helper_gate import HelperGate
    from helper.gates.identity import UntrustedPrm

    common = dict(backend=cfg.backend, device=cfg.spec.device)
    try:
        helper = HelperGate.load(cfg.helper, allow_fallback=False, **common)
        reason = "helper.json records no PRM" if helper.unscored else None
    except UntrustedPrm as error:
        helper, reason = None, str(error)
    if reason and not cfg.allow_fallback:
        raise ValueError(f"{reason.rstrip('.')}; calibrate would certify the helper's fallback classifier, not "
                         "the PRM-scored helper. Restore its PRM, or pass --allow-fallback to certify the fallback "
                         "(guarantee.json then says so).")
    return helper or HelperGate.load(cfg.helper, prm=False, **common), reason


def run(cfg: CalibrateConfig) -> dict:
    check(cfg)
    helper_dir = Path(cfg.helper)
    tiered_folder(cfg, helper_dir)  # --family priced on a tiered folder: refused before any episode is built
    env = Environment(cfg)
    check_disjoint(cfg, env, helper_dir)
    helper, fallback = load_helper(cfg)
    members = members_of(cfg, helper, helper_dir)
    helps = None
    if members[0]["family"] == "tiered":  # the folder's kinds at their prices and caps, who answers each here

        helps = helps_of(helper, env.setup, cfg.seed)
    frame = rollouts(cfg, env, members, helps)
    record = guarantee(cfg, frame, members, helper_dir) | {"fallback": fallback}
    if helps is not None:  # what the budgets are in: the kinds' prices and caps the members played with
        record |= {"family": "tiered", "backend": helper.backend, "kinds": {h.name: h.price for h in helps},
                   "caps": {h.name: h.cap for h in helps if h.cap is not None}}
    (helper_dir / "calibration").mkdir(exist_ok=True)
    chosen = members[[m is record["member"] for m in record["members"]].index(True)]
    if chosen["family"] == "priced":  # the certified table itself: the gate the guarantee covers
        from helper.solve import priced_family

        record["member"] |= priced_family.keep_table(helper_dir, chosen["table"], chosen["discretizer"])
    frame.to_csv(helper_dir / "calibration" / "episodes.csv", index=False)
    write_json_atomic(record, helper_dir / certify.GUARANTEE_FILE)
    for m in record["members"]:
        mark = "passed" if m["passed"] else ("failed" if m["tested"] else "not tested")
        spent = (f"cost {m['cost']:.2f}  calls " + " ".join(f"{k} {v:.2f}" for k, v in m["calls"].items())
                 if "cost" in m else f"interventions {m['interventions']:.2f}")
        print(f"calibrate: {certify.member_name(m):<22s} success {m['success']:.3f} ({m['successes']}/{record['n']})  "
              f"{spent}  p {m['p_value']:.3g}  {mark}")
    print(f"calibrate: {certify.describe(record)}; wrote {helper_dir / certify.GUARANTEE_FILE}")
    return record


def helps_of(helper, setup, seed: int):
    """The folder's kinds with their prices and caps as the loop's ``agile.helps.Help``s: the episodes' own expert of
    each kind they offer, ``human`` their expert, any other name the actor ``--strong`` would load for it."""
    from helper.data.help_kinds import own_kinds, resolve
    from trajectories.helps import HelpKind

    caps = helper.caps
    kinds = [HelpKind(k, float(helper.prices[k]), caps.get(k), actor=helper.actors.get(k)) for k in helper.kinds]
    try:
        return resolve(setup, kinds, own_kinds(setup, seed))
    except ValueError as error:
        raise ValueError(f"the helper's kinds ({', '.join(helper.kinds)}) on this environment: {error}") from error
