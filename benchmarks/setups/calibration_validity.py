"""Validity and efficiency of `helpgate calibrate`'s guarantee, measured by repeated calibration.

    python benchmarks/setups/calibration_validity.py plain-cue --pool 20000 --fresh 10000
    python benchmarks/setups/calibration_validity.py simulator --pool 6000 --fresh 6000
    python benchmarks/setups/calibration_validity.py run runs/plain-cue-tiny --pool 4000 --fresh 4000
    python benchmarks/setups/calibration_validity.py run runs/tw --pool 120 --start 0 --save tw0.npz   # then --merge

Each family of gates, ordered from most to least help, is played once on a pool of episodes (each member on the same
episodes, the real agent with its real slips or errors) and once on a separate fresh set. A repetition draws n pool
episodes at random, calibrates on their paired outcomes exactly as `helpgate calibrate` does
(``helper.gates.certify``: exact binomial tests at delta in a fixed sequence, the last member before the first failure),
and looks up the chosen member's true success and spend on the fresh set (or its exact value where one is known).
Since the pool's episodes are i.i.d. draws, a random n of them is a calibration on n fresh episodes. Per n the script
prints the share of repetitions whose chosen member's true success is below 1 - eps (the miscoverage, which must be
at most delta; with its 95% Clopper-Pearson interval), the share refused (no member certified), and the chosen
member's mean true interventions per episode.

Families, each played on the same pool episodes:

- ``budget``: the budgeted gates at C = Cmax, ..., 0 (the exact optimal gates on the true model for ``plain-cue`` and
  ``simulator``; the run's distilled helper for ``run``);
- ``priced``: for ``plain-cue`` and ``simulator`` the priced optimum on the true model (success minus a price per
  intervention, no budget; ``tabular_rl.solvers.solve_priced``) at prices from 0 up, one member per distinct policy; for
  ``run`` the family of ``python benchmarks/experiment.py calibrate --family priced --prices P``
  (``helper.solve.priced_family``: the run's own solve priced under its largest budget, played by the solved table);
- ``threshold`` (KnowNo-style): help whenever the verifier's score is at or below tau, no budget, tau over a fixed
  grid from high (always help) to low (never): for ``plain-cue`` and ``simulator`` the perfect verifier (the agent's
  true chance of getting the step right), for ``run`` the run's PRM with tau at the 0, 5, ..., 100% quantiles of its
  out-of-fold training scores (fixed before any calibration episode is seen).

With ``--fresh 0`` each member's success and spend are read on the whole pool instead of a fresh set (for the cost
comparison where playing episodes is dear, e.g. TextWorld; the miscoverage is then optimistic). A pool too big for one
run is played in chunks: ``--start S --pool K --save chunk.npz`` plays pool episodes S..S+K-1 and saves their outcomes,
``--merge chunk0.npz chunk1.npz ...`` reports on their union (disjoint ranges of the one seed); ``--families`` plays
only some families in a chunk, and the merge takes each family from the chunks that hold it (all on the same episodes). The cost lines pair the
families on each repetition's calibration episodes (every family draws the same ones) and give the 2.5-97.5%
percentiles of the per-repetition saving; ``--boot B`` adds a 95% interval of the mean saving over B resamples of the
pool's episodes (what a finite pool leaves uncertain: the calibration draws and, with no fresh set, the true spends).

``plain-cue``: ``examples.plain_cue`` (true successes of the budget family exact, ``examples.plain_cue_optimum``).
``simulator``: ProductQA's simulator agent on the generated catalog, 4 questions a session, success = every answer
right. ``run``: a ``helpgate pipeline`` folder; episodes of its sweep's environment on its test split with seed 3000,
which its collection and sweep never used.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from helper.gates.simple import ScoreThresholdGate  # noqa: E402
from agile.rollout import run_episodes  # noqa: E402
from helper.gates.certify import chosen_index  # noqa: E402

NS = (100, 300, 1000)
PRICES = np.round(np.linspace(0.0, 1.0, 51), 3)
"""Prices of an intervention (in units of success) of the priced family on a true model."""
SEED = 3000
"""Seed of the pool and the fresh set, episodes 0..pool-1 and pool..pool+fresh-1 of it (the pipeline collects with S
and sweeps with S + 1000, S small): one seed, so that a TextWorld test split plays the same drawn games in both."""


@dataclass
class Member:
    name: str
    build: object  # () -> gate
    budget: int


@dataclass
class Setup:
    episodes: object  # (count, start) -> fresh episodes start..start+count-1 of SEED
    base: object
    strong: object
    families: dict  # name -> list[Member], most help first
    exact: dict  # family name -> {member name: exact true success}
    success_at: float = 1.0


def play(setup: Setup, episodes, member: Member) -> tuple[np.ndarray, np.ndarray]:
    """(success 0/1, interventions) per episode of one member on clones of ``episodes``."""
    copies = [e.clone() for e in episodes]
    gate = member.build()
    records = run_episodes(copies, setup.base, setup.strong, gate=gate, budget=member.budget)
    scorer = getattr(getattr(gate, "score", None), "__self__", None)
    for episode in copies:  # a scorer keeps each episode's history: free it
        if hasattr(scorer, "end_episode"):
            scorer.end_episode(episode.episode_id)
    success = np.array([e.success() >= setup.success_at - 1e-12 for e in copies], dtype=int)
    used = np.array([sum(r.intervened for r in rec) for rec in records], dtype=float)
    return success, used


_SHARED: tuple = ()
"""(setup, episodes) for the forked workers of ``outcomes`` (inherited, never pickled)."""


def _play_job(job: tuple[str, int]):
    setup, episodes = _SHARED
    return play(setup, episodes, setup.families[job[0]][job[1]])


def outcomes(setup: Setup, count: int, start: int, workers: int = 1) -> dict:
    """``{family: (success (members, count), interventions (members, count))}`` on episodes start..start+count-1;
    ``workers`` > 1 plays the members in that many forked processes (a machine with the cores for it)."""
    global _SHARED
    started = time.perf_counter()
    episodes = setup.episodes(count, start)
    jobs = [(name, i) for name, members in setup.families.items() for i in range(len(members))]
    if workers > 1:
        import multiprocessing

        _SHARED = (setup, episodes)
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            played = dict(zip(jobs, pool.map(_play_job, jobs, chunksize=1)))
    else:
        played = {job: play(setup, episodes, setup.families[job[0]][job[1]]) for job in jobs}
    out = {}
    for name, members in setup.families.items():
        rows = [played[(name, i)] for i in range(len(members))]
        out[name] = (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))
    print(f"  {len(jobs)} members x {count} episodes (from {start}) in {time.perf_counter() - started:.0f} s", flush=True)
    return out


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    low = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
    return low, high


def repeat(success: np.ndarray, truth: np.ndarray, spend: np.ndarray, n: int, eps: float, delta: float, reps: int,
           rng: np.random.Generator) -> dict:
    """``reps`` calibrations on ``n`` pool episodes drawn without replacement: miscoverage, refusals, spend."""
    wrong = refused = 0
    spent = np.full(reps, np.nan)  # per repetition (NaN: refused); every family draws the same episodes per rep
    for rep in range(reps):
        pick = rng.choice(success.shape[1], size=n, replace=False)
        chosen = chosen_index(success[:, pick].sum(axis=1), n, eps, delta)
        if chosen is None:
            refused += 1
            continue
        wrong += truth[chosen] < 1 - eps
        spent[rep] = spend[chosen]
    low, high = clopper_pearson(wrong, reps)
    certified = int(np.isfinite(spent).sum())
    return {"n": n, "miscoverage": wrong / reps, "ci": (low, high), "refused": refused / reps,
            "spend": float(np.nanmean(spent)) if certified else float("nan"), "certified": certified,
            "spent": spent}


def chosen_many(counts: np.ndarray, n: int, eps: float, delta: float) -> np.ndarray:
    """``chosen_index`` for many calibrations at once: ``counts`` (calibrations, members) -> index, -1 if refused."""
    passed = np.cumprod(stats.binom.sf(counts - 1, n, 1.0 - eps) <= delta, axis=1).sum(axis=1)
    return passed - 1


def bootstrap_saving(pool: dict, fresh: dict | None, family: str, eps: float, n: int, delta: float, reps: int,
                     boots: int, seed: int) -> tuple[float, float]:
    """95% percentile interval of the mean saving (1 - family spend / threshold spend, means over the repetitions
    where each certified) over ``boots`` resamples of the pool's episodes: what varies is the episodes, both the
    calibration draws and, with no fresh set, the pool that measures each member's true spend."""
    rng = np.random.default_rng(seed)
    size = pool[family][0].shape[1]
    savings = []
    for _ in range(boots):
        episodes = rng.integers(0, size, size)
        picks = episodes[np.argsort(rng.random((reps, size)), axis=1)[:, :n]]  # n distinct draws a repetition
        means = []
        for name in (family, "threshold"):
            success, used = pool[name]
            spend = (fresh[name][1] if fresh else used[:, episodes]).mean(axis=1)
            chosen = chosen_many(success[:, picks].sum(axis=2).T, n, eps, delta)
            means.append(spend[chosen[chosen >= 0]].mean() if (chosen >= 0).any() else np.nan)
        savings.append(1 - means[0] / means[1] if means[1] > 0 else np.nan)
    savings = np.array(savings)
    savings = savings[np.isfinite(savings)]
    return (float(np.percentile(savings, 2.5)), float(np.percentile(savings, 97.5))) if savings.size else (np.nan, np.nan)


def report(setup: Setup, pool: dict, fresh: dict, eps_list: list[float], delta: float, reps: int, seed: int,
           boots: int = 0) -> dict:
    results = {}
    given = fresh
    fresh = fresh or pool  # no fresh set: each member's success and spend read on the whole pool
    where = "fresh set" if fresh is not pool else "whole pool, no fresh set: miscoverage optimistic"
    for family, members in setup.families.items():
        success, _ = pool[family]
        truth = fresh[family][0].mean(axis=1).astype(float)
        exact = setup.exact.get(family, {})
        truth = np.array([exact.get(m.name, t) for m, t in zip(members, truth)])
        spend = fresh[family][1].mean(axis=1)
        print(f"\nfamily {family}: true success (interventions) per member, most help first"
              + (" (exact)" if exact else f" ({where} of {fresh[family][0].shape[1]})"))
        print("  " + "  ".join(f"{m.name} {t:.3f} ({s:.2f})" for m, t, s in zip(members, truth, spend)))
        for eps in eps_list:
            rng = np.random.default_rng(seed)
            for n in NS:
                if n > success.shape[1]:
                    continue
                r = repeat(success, truth, spend, n, eps, delta, reps, rng)
                results[(family, eps, n)] = r
                print(f"  target {1 - eps:.2f} delta {delta:g} n {n:>4}: miscoverage {r['miscoverage']:.3f} "
                      f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] (<= {delta:g}: {'yes' if r['miscoverage'] <= delta else 'NO'})"
                      f"  refused {r['refused']:.3f}  chosen spend {r['spend']:.3f}")
    for family in [f for f in setup.families if f != "threshold"] if "threshold" in setup.families else []:
        print(f"\nefficiency: the chosen member's true interventions per episode, {family} family / threshold family "
              "(over the repetitions that certified)")
        for eps in eps_list:
            for n in NS:
                b, t = results.get((family, eps, n)), results.get(("threshold", eps, n))
                if b and t:
                    saving = 1 - b["spend"] / t["spend"] if t["spend"] > 0 else float("nan")
                    # Paired: the repetitions where both families certified (same calibration episodes).
                    both = np.isfinite(b["spent"]) & np.isfinite(t["spent"]) & (t["spent"] > 0)
                    per_rep = 1 - b["spent"][both] / t["spent"][both]
                    spread = (f"[{100 * np.percentile(per_rep, 2.5):+.1f}%, {100 * np.percentile(per_rep, 97.5):+.1f}%]"
                              f" over {both.sum()} paired reps" if both.any() else "no paired reps")
                    if boots:
                        low, high = bootstrap_saving(pool, given, family, eps, n, delta, reps, boots, seed)
                        spread += f"; bootstrap of the episodes 95%: [{100 * low:+.1f}%, {100 * high:+.1f}%]"
                    print(f"  target {1 - eps:.2f} n {n:>4}: {family} {b['spend']:.3f} (refused {b['refused']:.2f})  "
                          f"threshold {t['spend']:.3f} (refused {t['refused']:.2f})  fewer interventions: "
                          f"{100 * saving:+.1f}% (per repetition, 2.5-97.5%: {spread})")
    return results


def threshold_family(score, grid, horizon: int, decide_after: str = "state", levels=None) -> list[Member]:
    """Help whenever ``score <= tau``, tau from the highest (always) to the lowest (never); no budget. ``levels``: the
    only values the score takes (a perfect verifier), where two taus that keep the same levels are one gate and only
    the first is played (its outcomes would repeat, and so would the fixed sequence's verdict)."""
    taus = [np.inf, *sorted(set(float(t) for t in grid), reverse=True), -np.inf]
    if levels is not None:
        kept = {}
        for t in taus:
            kept.setdefault(frozenset(v for v in levels if v <= t), t)
        taus = list(kept.values())
    return [Member(f"tau={t:.3g}", (lambda t=t: ScoreThresholdGate(score, t, horizon, decide_after=decide_after)),
                   horizon) for t in taus]


def priced_family(model, state_of, prices) -> list[Member]:
    """The priced optimum on the true model (success - price per intervention, no budget), price from 0 (most help)
    up; a price whose policy equals a lower price's is the same gate and is left out."""
    from helper.gates.simple import TableGate
    from tabular_rl.solvers import solve_priced

    members, seen = [], []
    for price in sorted(prices):
        solution = solve_priced(model, float(price))
        if any(np.array_equal(solution.policy, p) for p in seen):
            continue
        seen.append(solution.policy)
        members.append(Member(f"lambda={price:.3g}", (lambda s=solution: TableGate(s, state_of, model.horizon,
                                                                                    name="priced")), model.horizon))
    return members


def plain_cue() -> Setup:
    from examples.plain_cue import HORIZON, SLIP, make_agent, make_episodes
    from examples.plain_cue_optimum import RISKS, optimal_gate, optimum, true_model

    budget = [Member(f"C={c}", (lambda c=c: optimal_gate(c)), c) for c in range(HORIZON, -1, -1)]
    perfect = lambda o: 1.0 - SLIP[o.annotations["risk"]]  # noqa: E731 - the agent's true chance at this crossing
    grid = np.round(np.linspace(0.0, 1.0, 21), 2)
    priced = priced_family(true_model(), lambda o: RISKS.index(o.annotations["risk"]), PRICES)
    return Setup(lambda n, start: make_episodes("test", start + n, SEED)[start:], make_agent(), None,
                 {"budget": budget, "priced": priced,
                  "threshold": threshold_family(perfect, grid, HORIZON, levels={1.0 - p for p in SLIP.values()})},
                 {"budget": {f"C={c}": optimum(c)[0] for c in range(HORIZON + 1)}})


def simulator(questions: int = 4) -> Setup:
    from agile.envs.productqa import QUESTION_TYPES
    from agile.envs.scripted_answers import question_type
    from helper.gates import exact_optimal as exact
    from helper.data.environment import EnvConfig, EnvSpec, Environment

    cfg = EnvConfig(spec=EnvSpec(env="productqa", agent="simulator", memory="lexical",
                                 questions_per_episode=questions), split="test")
    env = Environment(cfg)
    accuracy = dict(zip(QUESTION_TYPES, cfg.spec.sim_accuracy))
    model = exact.simulator_model(env.type_sequences(), accuracy, QUESTION_TYPES, env.horizon)
    budget = [Member(f"C={c}", (lambda c=c: exact.exact_optimal_gate(model, QUESTION_TYPES, question_type, c)), c)
              for c in range(questions, -1, -1)]
    perfect = lambda o: accuracy[question_type(o)]  # noqa: E731 - the simulator's true accuracy on this question
    grid = np.round(np.linspace(0.0, 1.0, 21), 2)
    priced = priced_family(model, lambda o: QUESTION_TYPES.index(question_type(o)), PRICES)
    return Setup(lambda n, start: env.episodes(n, SEED, start), env.base, env.strong,
                 {"budget": budget, "priced": priced,
                  "threshold": threshold_family(perfect, grid, questions, levels=set(accuracy.values()))}, {})


def pipeline_run(run: Path, grid_size: int = 21, prices: int = 21, quantiles: list[float] | None = None) -> Setup:
    import polars as pl

    from helper.data.environment import Environment
    from helper.evaluation.play import load_helper
    from helper.evaluation.sweep import SweepConfig
    from helper.stored_config import config_of

    summary = run / "sweep" / "summary.json"
    cfg = config_of(SweepConfig, json.loads(summary.read_text())["config"], where=summary)
    cfg = replace(cfg, helper=str(run / "helper"))  # the run folder may have moved since its sweep
    env = Environment(cfg)
    helper = load_helper(cfg, cfg.helper_backend)
    horizon = env.horizon
    budget = [Member(f"C={c}", (lambda c=c: helper.with_budget(c)), c) for c in range(helper.solved_budget, -1, -1)]
    scores = pl.read_parquet(run / "prm" / "oof_scores.parquet")["prm_score"].drop_nans().to_numpy()
    grid = np.quantile(scores, quantiles if quantiles else np.linspace(0.0, 1.0, grid_size))
    families = {"budget": budget}
    if helper.scorer is not None and prices:
        from helper.solve import priced_family

        cap = helper.solved_budget
        tables, discretizer = priced_family.priced_members(run / "helper", cap, prices)
        families["priced"] = [Member(f"lambda={p:.3g}", (lambda t=t, p=p: priced_family.member_gate(
            helper, t, discretizer, cap, p)), cap) for p, t in tables]
    if helper.scorer is not None:
        families["threshold"] = threshold_family(helper.scorer.score, grid, horizon, helper.decide_after)
    return Setup(lambda n, start: env.episodes(n, SEED, start), env.base, env.strong, families, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setup", choices=["plain-cue", "simulator", "run"])
    parser.add_argument("run", nargs="?", help="pipeline folder (setup run)")
    parser.add_argument("--pool", type=int, default=20000, help="pool episodes the calibrations are drawn from")
    parser.add_argument("--fresh", type=int, default=10000, help="fresh episodes measuring each member's true success")
    parser.add_argument("--eps", type=float, nargs="+", default=[0.09, 0.1, 0.26, 0.3],
                        help="allowed failure rates (target 1 - eps; 0.09 and 0.26 put a plain-cue member just below)")
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0, help="seed of the repetitions' draws")
    parser.add_argument("--workers", type=int, default=1, help="processes playing the members (forked)")
    parser.add_argument("--grid", type=int, default=21, help="run: threshold quantiles of the PRM's scores")
    parser.add_argument("--prices", type=int, default=21,
                        help="run: prices of the priced family "
                             "(python benchmarks/experiment.py calibrate --family priced --prices; 0: none)")
    parser.add_argument("--start", type=int, default=0, help="first pool episode (a chunk of a pool too big for one run)")
    parser.add_argument("--save", help="write the pool's outcomes to this .npz (a chunk) and stop")
    parser.add_argument("--merge", nargs="+", help="pool = these saved chunks, concatenated (no episodes played)")
    parser.add_argument("--quantiles", type=float, nargs="+",
                        help="run: the threshold's quantiles of the PRM's scores, given (instead of --grid's even ones)")
    parser.add_argument("--families", nargs="+", help="play only these families (a chunk; --merge joins by family)")
    parser.add_argument("--boot", type=int, default=0,
                        help="resamples of the pool's episodes for a 95%% interval of each mean saving (0: none)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    setup = {"plain-cue": plain_cue, "simulator": simulator}[args.setup]() if args.setup != "run" \
        else pipeline_run(Path(args.run), args.grid, args.prices, args.quantiles)
    if args.families:
        setup.families = {name: setup.families[name] for name in args.families}
    print(f"{args.setup}{' ' + args.run if args.run else ''}: pool {args.pool} (from {args.start}), fresh {args.fresh}, "
          f"reps {args.reps}, delta {args.delta}, eps {args.eps}")
    if args.merge:  # chunks of one pool played by separate runs: disjoint episode ranges of the same seed
        chunks = [np.load(path) for path in args.merge]
        pool, ranges = {}, {}
        for f in setup.families:  # each family from the chunks that played it (these members), in episode order
            mine = sorted((c for c in chunks if f"{f}_success" in c.files
                           and c[f"{f}_success"].shape[0] == len(setup.families[f])), key=lambda c: int(c["start"]))
            if not mine:
                raise SystemExit(f"{f}: no chunk holds this set-up's {len(setup.families[f])} members")
            pool[f] = tuple(np.concatenate([c[f"{f}_{k}"] for c in mine], axis=1) for k in ("success", "used"))
            ranges[f] = [(int(c["start"]), int(c["count"])) for c in mine]
        if len({tuple(r) for r in ranges.values()}) != 1:
            raise SystemExit(f"the families' chunks cover different episodes: {ranges}")
        print(f"  pool: {pool[next(iter(pool))][0].shape[1]} episodes, chunks (start, count) {ranges}")
    else:
        pool = outcomes(setup, args.pool, args.start, args.workers)
    if args.save:
        np.savez(args.save, start=args.start, count=args.pool,
                 **{f"{f}_{k}": v for f, pair in pool.items() for k, v in zip(("success", "used"), pair)})
        print(f"wrote {args.save}; {time.perf_counter() - started:.0f} s")
        return
    fresh = outcomes(setup, args.fresh, args.start + args.pool, args.workers) if args.fresh else None
    report(setup, pool, fresh, args.eps, args.delta, args.reps, args.seed, args.boot)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
