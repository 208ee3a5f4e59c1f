"""helper: the offline dataset, distillation, the ``HelperGate``, baselines, metrics and the CLI.

``from helper import HelperGate`` is the entry point for agents; the import is lazy so that the
CLI and light modules do not pay for torch and scikit-learn.
"""

__all__ = ["HelperGate"]


def __getattr__(name):
    if name == "HelperGate":
        from helper.gate import HelperGate

        return HelperGate
    raise AttributeError(f"module 'helper' has no attribute {name!r}")
