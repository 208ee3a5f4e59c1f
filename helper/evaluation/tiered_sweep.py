"""``helpgate sweep`` on a helper that chooses which help to call: every method under each cost budget B.

    helpgate sweep --helper runs/tiered/helper --budgets 0 2 4 6 --out runs/tiered/sweep

``helpgate sweep`` comes here when the helper folder's ``helper.json`` names kinds (``helpgate solve --help-kinds``,
then ``distill``). Every method plays the same held-out episodes with the same kinds of help, each answered as in
collection (``helper.data.help_kinds.resolve``: the episodes' own experts, the human, the agent's own compute, a
model), under a hard cost budget B per episode in the unit of the prices (and each kind's cap):

- ``never`` (B = 0) and ``always`` (the dearest kind at every decision): the references.
- ``helper``: under each B the table the solve wrote for B (``tiered_policy_c{B}.npz``; a B it did not solve is
  solved from the same estimated model), read through the helper's PRM and discretizer: what the distilled
  classifier imitates (``distill`` reports its agreement with it).
- ``one_<kind>``, one per kind: the helper solved with only that kind (``helper.gates.tiered_baselines``).
- ``cascade``: the cheapest kind on a riskier state, the dearest on a riskiest one, thresholds and fallback chosen
  on the estimated model.
- ``random_kind``: the helper's timing with a uniformly drawn affordable kind.

It plays this whole family whatever ``--methods`` says (those name the one-kind sweep's methods).

The estimated model is the solve's (its rows, discretizer and settings, from ``solution.json``), so every table
is fitted on the training rows only. Writes ``out``: ``sweep.csv`` (the one-kind sweep's columns plus ``cost`` and
``calls_<kind>``), ``episodes.csv`` (per method, budget and episode, with its cost: what ``helpgate report``
resamples, the helper against each baseline under the same B), ``summary.json`` (per method and B the played
success and cost, and the estimated ones; the cascade's chosen thresholds) and ``sweep.png`` (success against cost
per episode, one curve per method).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from agile.helps import Help
from helper.gates.tiered_baselines import AlwaysKind, RandomKindGate, best_cascade, cascade_risk, one_kind_solution
from helper.data import help_kinds
from helper.data.environment import Environment
from helper.evaluation.play import evaluate_gate
from helper.evaluation.metrics import sweep_columns, summarize
from helper.evaluation.plots import save_sweep_plot
from helper.gates.helper_gate import CONFIG_FILE, resolve_recorded
from helper.gates.tiered_helper_gate import TieredHelperGate
from helper.stored_config import flat
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, TieredSolution, estimate_tiered, solve_tiered
from tabular_rl.transitions import Columns
from trajectories.files import write_json_atomic
from trajectories.helps import HelpKind
from trajectories.shards import read_shard

BASELINES = ("cascade", "random_kind")
"""Besides one ``one_<kind>`` per kind."""


def is_tiered(helper: str | Path) -> bool:
    """Whether the helper folder chooses among kinds of help (its ``helper.json`` names them)."""
    path = Path(helper) / CONFIG_FILE
    return path.is_file() and bool(json.loads(path.read_text()).get("kinds"))


class TieredFamily:
    """The solve a tiered helper was distilled from, re-read: its estimated model and a table per method and B."""

    def __init__(self, solve_dir: Path, kinds: tuple[str, ...], prices: dict[str, float], caps: dict[str, int]):
        record = json.loads((solve_dir / "solution.json").read_text())
        settings = record["config"]
        self.solve_dir, self.kinds, self.prices, self.caps = solve_dir, kinds, prices, caps
        self.method = settings.get("method", "exact")
        self.discretizer = Discretizer.load(solve_dir / "discretizer.json")
        rows = read_shard(solve_dir / "labels.parquet", require=("episode_id", "step", "prm_score"))
        rows = rows.select([c for c in rows.columns if not c.startswith("optimal_kind")])
        from helper.solve.solve_inputs import parse_backoff

        self.model = estimate_tiered(rows, self.discretizer, kinds, columns=Columns(),
                                     smoothing=settings.get("smoothing", 1.0),
                                     backoff=parse_backoff(settings.get("backoff", "auto")),
                                     objective=settings.get("objective", "success"),
                                     shaping=settings.get("shaping", 0.0))
        self.risk = cascade_risk(self.discretizer)
        self.cascade_choice: dict[int, str] = {}
        self._solved: dict[tuple[str, int], TieredSolution] = {}
        """Each table solved once: played, then read again for the summary's estimates."""

    def _once(self, name: str, budget: int, solve) -> TieredSolution:
        if (name, budget) not in self._solved:
            self._solved[name, budget] = solve()
        return self._solved[name, budget]

    def resources(self, budget: int) -> Resources:
        return Resources.of([self.prices[k] for k in self.kinds], budget, [self.caps.get(k) for k in self.kinds],
                            horizon=self.model.horizon)

    def helper(self, budget: int) -> TieredSolution:
        saved = self.solve_dir / f"tiered_policy_c{budget}.npz"
        return self._once("helper", budget, lambda: TieredSolution.load(saved) if saved.is_file()
                          else solve_tiered(self.model, self.resources(budget), self.method))

    def one_kind(self, budget: int, kind: str) -> TieredSolution:
        return self._once(f"one_{kind}", budget,
                          lambda: one_kind_solution(self.model, self.resources(budget), kind, self.method))

    def cascade(self, budget: int) -> TieredSolution:
        def solve() -> TieredSolution:
            tiers = (min(self.kinds, key=self.prices.get), max(self.kinds, key=self.prices.get))
            solution, self.cascade_choice[budget] = best_cascade(self.model, self.risk, tiers,
                                                                 self.resources(budget))
            return solution

        return self._once("cascade", budget, solve)


def _helps(env: Environment, config: dict, seed: int) -> list[Help]:
    caps, actors = config.get("caps") or {}, config.get("actors") or {}
    kinds = [HelpKind(k, float(config["prices"][k]), caps.get(k), actor=actors.get(k)) for k in config["kinds"]]
    return list(help_kinds.resolve(env.setup, kinds, help_kinds.own_kinds(env.setup, seed)))


def run(cfg, out: Path, scorer=None) -> dict:
    """The tiered sweep of ``cfg`` (a ``helper.evaluation.sweep.SweepConfig``) into ``out`` (checked by the
    caller); see the module docstring."""
    from helper.evaluation.play import load_helper

    config = json.loads((Path(cfg.helper) / CONFIG_FILE).read_text())
    helper = load_helper(cfg, "tiered_table")
    if scorer is not None:
        helper.scorer = scorer
    solve_dir = Path(cfg.train_data or resolve_recorded(cfg.helper, config, "labels_from") or "")
    if not (solve_dir / "solution.json").is_file():
        raise ValueError(f"train_data={str(solve_dir)!r}: no tiered solve there (solution.json); pass --train-data "
                         "with the folder `helpgate solve --help-kinds` wrote.")
    kinds = tuple(config["kinds"])
    family = TieredFamily(solve_dir, kinds, {k: float(v) for k, v in config["prices"].items()},
                          {k: int(v) for k, v in (config.get("caps") or {}).items()})
    env = Environment(cfg)
    helps = _helps(env, config, cfg.seed)
    record = solve_dir / "solve.json"
    solved = (json.loads(record.read_text()).get("budgets") or []) if record.is_file() else []
    budgets = sorted({int(b) for b in (cfg.budgets if cfg.budgets is not None else [0, *solved])})
    if not budgets or budgets[0] < 0:
        raise ValueError(f"budgets={cfg.budgets}: give cost budgets >= 0 per episode, e.g. --budgets 0 2 4")
    paid = [b for b in budgets if b > 0]

    def gate(solution_for, kind=TieredHelperGate):
        return lambda b: kind(solution_for(b), family.discretizer, helper.scorer, b, family.caps, helper.decide_after,
                              helper.trained_on)

    plays = {"never": (lambda b: None, [0]),
             "helper": (gate(family.helper), paid),
             **{f"one_{k}": (gate(lambda b, k=k: family.one_kind(b, k)), paid) for k in kinds},
             "cascade": (gate(family.cascade), paid),
             "random_kind": (gate(family.helper, RandomKindGate), paid)}
    dearest = max(kinds, key=family.prices.get)
    plays["always"] = (lambda b: AlwaysKind(kinds, dearest), [int(round(family.prices[dearest] * env.horizon))])
    rows, per_episode, seconds = [], [], {}
    for name, (gate_for, played_at) in plays.items():
        started = time.perf_counter()
        result = evaluate_gate(env, gate_for, played_at, name, cfg.ci_resamples, helps=helps)
        rows += result[0]
        per_episode += result[1]
        seconds[name] = round(time.perf_counter() - started, 1)
    spend_columns = ["cost", *(f"calls_{k}" for k in kinds)]
    frame = pd.DataFrame(rows, columns=sweep_columns(rows) + spend_columns)
    frame.to_csv(out / "sweep.csv", index=False)
    pd.DataFrame(per_episode).to_csv(out / "episodes.csv", index=False)
    summary = summarize(frame)
    summary["tiered"] = {"kinds": list(kinds), "prices": family.prices, "caps": family.caps, "solve": str(solve_dir),
                         "cost": {m: dict(zip(map(int, r["budget"]), r["cost"])) for m, r in frame.groupby("method")},
                         "estimated": _estimated(family, paid), "cascade_choice": family.cascade_choice,
                         "worth": _worth(frame, kinds)}
    summary["budgets"] = budgets
    summary["method_seconds"] = seconds
    summary["decide_after"] = helper.decide_after
    summary["config"] = flat(cfg)
    summary["helper_stats"] = helper.stats()
    write_json_atomic(summary, out / "summary.json")
    save_sweep_plot(frame, out / "sweep.png", cfg.title)
    _print(frame, kinds, out)
    return summary


def _estimated(family: TieredFamily, budgets: list[int]) -> dict:
    """Per method and B, the success and cost its table reaches in the estimated model (the training rows' view)."""
    out = {}
    for name, make in (("helper", family.helper), ("cascade", family.cascade),
                       *((f"one_{k}", lambda b, k=k: family.one_kind(b, k)) for k in family.kinds)):
        out[name] = {b: {"success": (s := make(b)).expected_success, "cost": s.expected_cost} for b in budgets}
    return out


def _worth(frame: pd.DataFrame, kinds: tuple[str, ...]) -> dict:
    """Per kind, what it bought in play: its one-kind helper's best gain over ``never`` at any budget, and the
    helper's calls of it summed over the budgets (zero where the helper never found it worth its price)."""
    never = float(frame.loc[frame["method"] == "never", "success"].mean())
    helper = frame[frame["method"] == "helper"]
    return {k: {"best_gain_over_never": float(frame.loc[frame["method"] == f"one_{k}", "success"].max() - never),
                "helper_calls": float(helper[f"calls_{k}"].sum())} for k in kinds}


def _print(frame: pd.DataFrame, kinds: tuple[str, ...], out: Path) -> None:
    print(f"{'method':>14s}  {'B':>3s}  success  cost   " + "  ".join(f"{k:>8s}" for k in kinds))
    for _, row in frame.sort_values(["method", "budget"]).iterrows():
        print(f"{row['method']:>14s}  {int(row['budget']):>3d}  {row['success']:.3f}  {row['cost']:5.2f}  "
              + "  ".join(f"{row[f'calls_{k}']:8.2f}" for k in kinds))
    for kind, seen in _worth(frame, kinds).items():
        print(f"{kind}: alone it adds at most {seen['best_gain_over_never']:+.3f} to never's success at any budget; "
              f"the helper calls it {seen['helper_calls']:.2f} times an episode summed over the budgets")
    print(f"sweep: wrote {out / 'sweep.csv'}, {out / 'summary.json'}, {out / 'sweep.png'}")

