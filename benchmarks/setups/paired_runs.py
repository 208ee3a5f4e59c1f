"""Two sets of kept runs that played the same held-out episodes: each method's success per cap, and one method's
difference between the sets, paired per episode.

    python benchmarks/setups/paired_runs.py --before benchmarks/data/tw-hard/before/seed* \\
        --after benchmarks/data/tw-hard/aligned/seed* --methods helper first_k prm_threshold random

The runs of a pair share their seed (so the same held-out episodes: the sweep draws them from the seed); they are
matched by their folder's name. Printed: per cap, every named method's mean success (interventions) in each set,
then the first method's after - before on the same episodes with a 95% t interval over the games
(``helper.evaluation.metrics.cluster_t_interval``, each game a cluster, seeds pooled; the sweep's ``group`` column
names the game).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from helper.evaluation.metrics import cluster_t_interval


def episodes(runs: list[Path]) -> pd.DataFrame:
    frames = [pd.read_csv(run / "sweep" / "episodes.csv").assign(seed=run.name) for run in runs]
    return pd.concat(frames, ignore_index=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, nargs="+", required=True)
    p.add_argument("--after", type=Path, nargs="+", required=True)
    p.add_argument("--methods", nargs="+", default=["helper", "first_k", "prm_threshold"])
    a = p.parse_args(argv)
    if sorted(r.name for r in a.before) != sorted(r.name for r in a.after):
        raise SystemExit(f"paired_runs: --before {[r.name for r in a.before]} and --after {[r.name for r in a.after]} "
                         "must name the same seeds' folders")
    sets = {"before": episodes(a.before), "after": episodes(a.after)}
    caps = sorted(int(c) for c in sets["after"].query("method == @a.methods[0]")["budget"].unique() if c > 0)
    print(f"{len(a.after)} seeds; mean success (interventions) per cap")
    for name, frame in sets.items():
        chosen = frame[frame["method"].isin(a.methods)]
        means = chosen.groupby(["method", "budget"])[["success", "interventions"]].mean()
        for method in a.methods:
            cells = [f"{means.loc[(method, c), 'success']:.3f} ({means.loc[(method, c), 'interventions']:.2f})"
                     if (method, c) in means.index else "-" for c in caps]
            print(f"  {name:<6} {method:<14} " + "  ".join(f"C={c}: {x}" for c, x in zip(caps, cells)))
    key = ["seed", "episode_id", "budget"]
    first = a.methods[0]
    paired = sets["after"].query("method == @first").merge(sets["before"].query("method == @first"), on=key,
                                                           suffixes=("_after", "_before"))
    paired["diff"] = paired["success_after"] - paired["success_before"]
    paired = paired.assign(game=paired["group_after"] if "group_after" in paired.columns else paired["episode_id"])
    print(f"{first}: after - before on the same episodes [95% t interval over games]")
    for c in caps:
        at = paired[paired["budget"] == c]
        low, high = cluster_t_interval(at["diff"].to_numpy(), [at["game"].tolist()])  # the report's interval
        print(f"  C={c}: {at['diff'].mean():+.3f} [{low:+.3f}, {high:+.3f}]  ({at['game'].nunique()} games, "
              f"{len(at)} episodes)")


if __name__ == "__main__":
    main()
