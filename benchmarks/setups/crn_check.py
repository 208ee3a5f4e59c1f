"""The sweep's C = 0 check on the common-random-numbers plug-in (``tests/crn_plugin.py``), as RESULTS' Trust quotes it.

    python benchmarks/setups/crn_check.py --episodes 100

Runs, for each of the plug-in's two agents, what RESULTS quotes (``cd tests && helpgate sweep --env
crn_plugin:make_episodes --agent crn_plugin:AGENT --episodes 100 --budgets 0 1 2 --methods never always first_k
random``) into a temporary folder, and prints each method's success at C = 0 and the sweep's ``c0_check`` from its
``summary.json``: ``own_random_agent`` keeps one ``random.Random`` across calls, so the C = 0 rows differ across
methods (the sweep warns); ``keyed_agent`` draws from ``observation.rng()``, so they are equal. Reads nothing but the
plug-in; a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the plug-in, as `cd tests` finds it

from helper.commands.cli import main as helpgate  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args(argv)
    print(f"{'agent':<18} {'C = 0 success by method':<48} equal  episodes differing")
    for agent in ("own_random_agent", "keyed_agent"):
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "sweep"
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                code = helpgate(["sweep", "--env", "crn_plugin:make_episodes", "--agent", f"crn_plugin:{agent}",
                                 "--episodes", str(args.episodes), "--budgets", "0", "1", "2",
                                 "--methods", "never", "always", "first_k", "random", "--out", str(out)])
            if code:
                raise SystemExit(f"helpgate sweep with {agent} exited {code}")
            summary = json.loads((out / "summary.json").read_text())
            rows = [line.split(",") for line in (out / "sweep.csv").read_text().splitlines()[1:]]
        check = summary["c0_check"]
        at_zero = "  ".join(f"{method} {float(success):.3f}" for method, budget, success, *_ in rows if budget == "0")
        print(f"{agent:<18} {at_zero:<48} {str(check['equal']):<6} {check['episodes_differing']} of "
              f"{check['episodes']}")


if __name__ == "__main__":
    main()
