"""helper: learn when an agent should ask for help, and plug the learned gate into it.

``from helper import HelperGate`` is the entry point for agents; ``from helper import Recorder``
records an agent that runs its own loop (``helper.data.recorder``). The imports are lazy so that
the CLI and light modules do not pay for torch and scikit-learn.

Four rooms every command shares, and six wings by purpose:

- ``config_cli.py``: a command's CLI from its config dataclass (``tyro``), user errors in one line.
- ``stored_config.py``: a command's config as its run folder stores it (flat), read back, and the
  one table of older keys and flags (``max_budget``, ``gate_budget``, ...) mapped to today's.
- ``provenance.py``: where a run folder came from (command, commit, machine, stage times).
- ``option_ranges.py``: the range of every numeric option of every command, checked before any work.
- ``experiment_options.py``: which config fields serve an experiment: hidden from ``helpgate``, refused in one
  line, shown by ``benchmarks/experiment.py``.
- ``data/``: collecting trajectories: episodes and actors, collection (in process or over Ray),
  the recorder, plug-in envs and agents.
- ``gates/``: every gate a user, the sweep or ``agile eval`` can build, in one registry: the ``HelperGate`` and
  what it reads and checks on load, the simple gates, and the baselines that learn or solve (online deep RL, the
  nearest neighbours, the thresholds at full strength, the exact optimum, the tiered baselines).
- ``solve/``: from scored trajectories to what a helper gate plays: solve, distill, the member each cap plays.
- ``evaluation/``: the sweep and its methods, online evaluation, metrics, plots, the report, and
  ``agile eval`` with a helper.
- ``serve/``: the gate and a model behind HTTP, and what both servers refuse.
- ``commands/``: the ``helpgate`` command and ``helpgate pipeline``.
"""

__all__ = ["HelperGate", "Recorder"]


def __getattr__(name):
    if name == "HelperGate":
        from helper.gates.helper_gate import HelperGate

        return HelperGate
    if name == "Recorder":
        from helper.data.recorder import Recorder

        return Recorder
    raise AttributeError(f"module 'helper' has no attribute {name!r}")
