"""The probe's cross-validated fit: Newton against L-BFGS on the main job's own features, one run.

    python benchmarks/speed/probe_fit.py

``benchmarks/data/main-cf/probe_fold1.npz`` holds the inputs of the first cross-validation of
``helpgate pipeline --out runs/main-cf-2 --seed 0`` at 5437216, fold 1 (128 training rows of 582 inputs: the
frozen SmolLM2's 576 features and 6 free signal columns; their labels and episode groups). Both fits pick the
L2 penalty over ``prm.training.probe.L2_GRID`` by 3-fold CV, then fit the chosen one: ``fit_head`` as the product
runs it (Newton for a value head) and the same with L-BFGS (200 iterations, the product's setting before Newton).
Printed: best seconds of each over ``--repeats``, the ratio, the penalties chosen and the largest difference
between the two final heads' scores on the rows.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from prm.training import probe
from prm.verifiers.model import ValueHead

DATA = Path(__file__).resolve().parents[1] / "data" / "main-cf" / "probe_fold1.npz"


def lbfgs_fit(head, x, y, l2, steps, losses=None):
    """The product's fit before Newton: the inputs standardised, then L-BFGS for ``steps`` iterations."""
    head.fit_normalizer(x)
    return probe.lbfgs_fit(head, x, y, l2, steps, losses)


def cross_validated_fit(fit, x, y, groups, free):
    """The L2 chosen by 3-fold CV with ``fit`` as the probe's fit, and the head fitted with it on every row."""
    product_fit = probe.fit_head
    probe.fit_head = fit  # cross_validated_l2 calls the module's fit_head
    try:
        l2, _ = probe.cross_validated_l2(ValueHead(x.shape[1], free_inputs=free), x, y, groups, 200, 0)
    finally:
        probe.fit_head = product_fit
    return l2, fit(ValueHead(x.shape[1], free_inputs=free), x, y, l2, 200)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (best is kept)")
    args = parser.parse_args(argv)
    data = np.load(DATA)
    x, y, groups, free = (torch.from_numpy(data["x"]), torch.from_numpy(data["y"]), data["groups"],
                          int(data["free_inputs"]))
    results = {}
    for name, fit in (("newton", probe.fit_head), ("lbfgs", lbfgs_fit)):
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            l2, head = cross_validated_fit(fit, x, y, groups, free)
            best = min(best, time.perf_counter() - start)
        with torch.no_grad():
            results[name] = (best, l2, torch.sigmoid(head(x)))
    print(f"{x.shape[0]} rows x {x.shape[1]} inputs ({free} free), {torch.get_num_threads()} threads")
    for name, (seconds, l2, _) in results.items():
        print(f"{name:>7}: {seconds:6.2f} s (CV over {len(probe.L2_GRID)} penalties x 3 folds + the final fit), l2 {l2:g}")
    diff = float((results["newton"][2] - results["lbfgs"][2]).abs().max())
    print(f"ratio (lbfgs / newton): {results['lbfgs'][0] / results['newton'][0]:.2f}x; max |score diff| {diff:.1e}")


if __name__ == "__main__":
    main()
