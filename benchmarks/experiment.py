"""The benchmarks' own command line: ``helpgate``'s subcommands with every config field a flag.

    python benchmarks/experiment.py pipeline --out runs/evidence --prm-evidence-features
    python benchmarks/experiment.py prm train --data runs/demo/trajectories --question-vector

The product's CLI hides the options that serve a measurement, an ablation or a rejected idea
(``helper.experiment_options.EXPERIMENT_OPTIONS``) and refuses them in one line naming this entry; here
they are shown, parsed into the same config classes, and run by the same commands (a run folder records
this command line as its own).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from helper.commands.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], experiments=True))
