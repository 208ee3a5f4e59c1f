"""The main job's collection alone: ``helpgate pipeline``'s collect stage with its embedded defaults (the generated
catalog, the SmolLM2 agent, proposal mode, 64 episodes), for a seed, into ``OUT/trajectories``; resumes.

    python benchmarks/verifier/main_job_collection.py --seed 0 --out runs/catalog-s0

The verifier benchmarks (``prm_evidence.py --env catalog``) read it like a cross-fitted collection.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helper.commands.pipeline import PipelineConfig, collect_stage, solved_budgets  # noqa: E402
from helper.stored_config import config_of  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = config_of(PipelineConfig, seed=args.seed, out=str(args.out))
    cfg = cfg.__class__(**{**cfg.__dict__, "decide_after": cfg.decide_mode()})
    args.out.mkdir(parents=True, exist_ok=True)
    collect_stage(cfg, args.out, max(solved_budgets(cfg), default=0))


if __name__ == "__main__":
    main()
