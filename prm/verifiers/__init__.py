"""The verifiers: the PRM's two kinds, the backbones they stand on, their calibration, and loading.

- ``model.py``: ``ProcessRewardModel``: a causal-LM backbone read at step tags with a step-tag (+/-)
  or value head; all steps of an episode scored in one forward pass; ``save``.
- ``encoder.py``: ``EncoderPRM``: a cross-encoder PRM (``--model encoder``: all-MiniLM-L6-v2 fine-tuned
  whole), one mean-pooled window per step, through the same scoring and saving.
- ``backbones.py``: ``check_backbone``: which kind a backbone name means; one that cannot be loaded
  refused in one line naming the option.
- ``calibration.py``: ``Calibrator``: an isotonic or Platt map fitted on out-of-fold scores, saved as
  ``calibration.json`` and applied wherever the PRM scores.
- ``load.py``: ``load_prm``: a saved PRM folder of either kind.
- ``fingerprint.py``: ``prm_fingerprint``: a hash of the files that decide a saved PRM's scores.
"""
