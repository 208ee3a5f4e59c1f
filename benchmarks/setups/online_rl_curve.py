"""The online deep-RL baseline's learning curve on the ProductQA simulator, against first_k and the optimum.

Trains ``helper.gates.online_rl`` (stable-baselines3 PPO) on training-split episodes until its curve
flattens, then plays the same held-out test episodes with it, ``first_k`` and ``exact_optimal``
(backward induction on the simulator's true model: the ceiling) at every C, and prints the curve
(validation success at each C against cumulative training calls) and the paired test differences.
Writes ``online_rl_curve.csv`` / ``.png`` (exact_optimal's success on the same validation episodes
drawn as the reference lines)
and ``result.json`` under --out::

    python benchmarks/setups/online_rl_curve.py --out runs/bench_online_rl --budgets 1 2 3 --seeds 0 1

The simulator's draws are a pure function of (episode, step), so the methods see the same draws on
the same episodes: the differences are paired.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from helper.gates import simple as B
from agile.envs.productqa import QUESTION_TYPES
from agile.envs.scripted_answers import question_type
from helper.gates import exact_optimal as exact
from helper.data.environment import EnvConfig, Environment, EnvSpec
from helper.evaluation.play import evaluate_gate
from helper.evaluation.metrics import bootstrap_ci
from helper.gates.online_rl import (
    OnlineRLConfig,
    OnlineRLGate,
    calls_to_reach,
    curve_frame,
    save_learning_curve,
    train,
    validation_success,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_online_rl")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3], help="training and test budgets C")
    parser.add_argument("--questions", type=int, default=4, help="questions per episode")
    parser.add_argument("--episodes", type=int, default=512, help="held-out test episodes per method and C")
    parser.add_argument("--total-timesteps", type=int, default=60_000)
    parser.add_argument("--eval-every", type=int, default=1024)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    env = Environment(EnvConfig(spec=EnvSpec(questions_per_episode=args.questions), episodes=args.episodes))
    budgets = sorted(set(args.budgets))
    model = exact.simulator_model(env.type_sequences(), dict(zip(QUESTION_TYPES, env.cfg.spec.sim_accuracy)),
                              QUESTION_TYPES, env.horizon)

    def per_episode(make):
        """Success per held-out episode at each C (the same episodes, in the same order, for every method)."""
        rows = evaluate_gate(env, make, budgets, "method", 200)[1]
        return {c: np.array([r["success"] for r in rows if r["budget"] == c]) for c in budgets}

    first_k = per_episode(lambda c: B.FirstKGate(c))
    optimum = per_episode(lambda c: exact.exact_optimal_gate(model, QUESTION_TYPES, question_type, c))
    results = {"args": vars(args), "first_k": {c: float(v.mean()) for c, v in first_k.items()},
               "exact_optimal": {c: float(v.mean()) for c, v in optimum.items()}, "seeds": {}}
    for seed in args.seeds:
        started = time.perf_counter()
        cfg = OnlineRLConfig(budgets=budgets, total_timesteps=args.total_timesteps,
                             eval_every=args.eval_every, seed=seed, episode_seed=500 + 17 * seed)
        policy, report = train(env, cfg)
        seconds = time.perf_counter() - started
        rl = per_episode(lambda c, policy=policy: OnlineRLGate(policy, c))
        out = Path(args.out) / f"seed{seed}"
        # The optimum's success on the curve's own validation episodes is the reference line.
        reference = validation_success(
            env, cfg, lambda c: exact.exact_optimal_gate(model, QUESTION_TYPES, question_type, c))[0]
        save_learning_curve(report, out, reference, label="exact_optimal")
        curve = curve_frame(report).pivot_table(index=["timesteps", "calls"], columns="budget", values="success")
        print(f"\n## seed {seed}: {report.stopped}; {report.timesteps} timesteps, {report.episodes} episodes, "
              f"training calls {report.calls}, validation calls {report.validation_calls}, best at "
              f"{report.best_timesteps} timesteps; {seconds:.0f} s")
        print(curve.round(3).to_string())
        print("exact_optimal on the validation episodes:", {c: round(v, 3) for c, v in reference.items()},
              "; training calls to reach it:", calls_to_reach(report, reference))
        entry = {"stopped": report.stopped, "timesteps": report.timesteps, "calls": report.calls,
                 "episodes": report.episodes, "seconds": round(seconds, 1),
                 "exact_optimal_on_validation": reference,
                 "calls_to_reach_exact_optimal_on_validation": calls_to_reach(report, reference),
                 "test": {}}
        for c in budgets:
            row = {"online_rl": float(rl[c].mean())}
            for name, other in (("first_k", first_k), ("exact_optimal", optimum)):
                low, high = bootstrap_ci(rl[c] - other[c], resamples=2000, seed=c)
                row[f"minus_{name}"] = [float((rl[c] - other[c]).mean()), low, high]
            entry["test"][c] = row
            print(f"test C={c}: online_rl {row['online_rl']:.3f}  first_k {first_k[c].mean():.3f}  "
                  f"exact_optimal {optimum[c].mean():.3f}  online_rl - first_k {row['minus_first_k'][0]:+.3f} "
                  f"[{row['minus_first_k'][1]:+.3f}, {row['minus_first_k'][2]:+.3f}]  online_rl - exact_optimal "
                  f"{row['minus_exact_optimal'][0]:+.3f}")
        results["seeds"][seed] = entry
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
