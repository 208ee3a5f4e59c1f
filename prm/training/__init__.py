"""Training the PRM out of fold, and how good its scores are.

- ``train.py``: ``helpgate prm train`` (``TrainConfig`` / ``run_train``): labels, fold heads and the
  all-data head, out-of-fold scores, calibration, the quality report.
- ``probe.py``: the frozen probe: a head fitted on cached backbone features, its L2 chosen by CV.
- ``finetune.py``: ``fine_tune``: trained verifiers (LoRA adapters, or a whole encoder), one copy per
  fold, each value head started from the frozen probe.
- ``quality.py``: AUROC, Brier score, expected calibration error, the reliability plot.
"""
