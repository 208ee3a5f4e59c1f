"""More sweeps on a finished ``helpgate pipeline`` run: other methods, another helper backend, more
held-out episodes, without collecting, training or solving again.

    python benchmarks/setups/resweep.py runs/evidence/main-proposal/seed0 sweep_table helper helper_priced --backend table
    python benchmarks/setups/resweep.py runs/evidence/main-proposal/seed0 sweep64 helper random --episodes 64 --budgets 0 1 2
    python benchmarks/setups/resweep.py runs/evidence/productqa-proposal/seed0 sweep_rl helper online_rl --rl-train-episodes 64

The held-out episodes are the run's own (its env, split, seed + 1000, questions per episode and
mode from ``pipeline.json``): with the run's episode count the rows pair episode by episode with
its ``sweep/``; with more episodes the first ones are the same. Writes ``RUN/NAME/`` as ``helpgate
sweep`` does (sweep.csv, episodes.csv, summary.json, sweep.png).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helper.commands.pipeline import PipelineConfig
from helper.evaluation import sweep
from helper.stored_config import config_of


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished pipeline folder (pipeline.json, helper/, solve/)")
    parser.add_argument("name", help="output folder inside the run")
    parser.add_argument("methods", nargs="+", choices=sweep.METHODS)
    parser.add_argument("--episodes", type=int, help="held-out episodes (default: the run's own count)")
    parser.add_argument("--budgets", type=int, nargs="+", help="budgets C of the sweep (default: the run's own)")
    parser.add_argument("--backend", choices=("features", "text", "table"), help="override the helper's backend")
    parser.add_argument("--rl-train-episodes", type=int,
                        help="online_rl replays this many training episodes (default: a fresh one each time)")
    parser.add_argument("--rl-val-episodes", type=int, help="online_rl's validation episodes per curve point")
    args = parser.parse_args(argv)
    if not (args.run / "pipeline.json").exists():
        raise SystemExit(f"{args.run / 'pipeline.json'}: not found; give a folder written by `helpgate pipeline`.")
    cfg = config_of(PipelineConfig, json.loads((args.run / "pipeline.json").read_text()), args.run / "pipeline.json")
    held_out = args.episodes or cfg.sizes()[1]
    own = None if cfg.budgets is None else sorted({0, *cfg.budgets})  # as the pipeline's sweep played them
    return sweep.run(sweep.SweepConfig(
        spec=cfg.spec, helper=str(args.run / "helper"), out=str(args.run / args.name),
        budgets=own if args.budgets is None else args.budgets,
        split="test", episodes=held_out, seed=cfg.seed + 1000, train_data=str(args.run / "solve"),
        decide_after=cfg.decide_mode(), methods=args.methods, helper_backend=args.backend,
        rl_train_episodes=args.rl_train_episodes,
        **({} if args.rl_val_episodes is None else {"rl_val_episodes": args.rl_val_episodes})))


if __name__ == "__main__":
    main()
