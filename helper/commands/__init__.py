"""Commands that join the stages.

- ``cli.py``: ``helpgate``: one subcommand per stage, each generated from its config dataclass.
- ``pipeline.py``: ``helpgate pipeline``: every stage end to end in one folder, resumable.
- ``choose.py``: the pipeline's PRM target, pooling and binning chosen on the training folds (``auto``).
- ``resume.py``: which finished stages a rerun with other settings would make stale.
- ``cross_fit.py``: ``pipeline --cross-fit K``: folds of product groups from one collection, each an ordinary run
  on the other folds' groups, pooled for ``helpgate report``.
- ``calibrate.py``: ``helpgate calibrate``: the helper at each budget played on held-out episodes, the cheapest
  certified budget written to ``guarantee.json`` (statistics: ``helper.gates.certify``).
"""
