"""helper: the offline dataset, distillation, the ``HelperGate``, baselines, metrics and the CLI.

``from helper import HelperGate`` is the entry point for agents; ``from helper import Recorder``
records an agent that runs its own loop (``helper.recorder``). The imports are lazy so that the
CLI and light modules do not pay for torch and scikit-learn.
"""

__all__ = ["HelperGate", "Recorder"]


def __getattr__(name):
    if name == "HelperGate":
        from helper.gate import HelperGate

        return HelperGate
    if name == "Recorder":
        from helper.recorder import Recorder

        return Recorder
    raise AttributeError(f"module 'helper' has no attribute {name!r}")
