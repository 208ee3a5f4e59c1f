"""Every gate a user, the sweep or ``agile eval`` can build, one registry of them (``registry.py``), and what a
gate reads when it decides (its features, classifiers and the checks of a helper folder on load).

The gates:

- ``helper_gate.py``: ``HelperGate``: load a helper folder, decide within the budget; ``choose`` names the help to
  call. ``tiered_helper_gate.py``: ``TieredHelperGate``, the helper that chooses among kinds of help, each at its
  price (``HelperGate.load`` returns one for a folder naming kinds).
- ``simple.py``: the simple gates: never, always, first k, random, uniform, novelty, phrasing, score threshold,
  hindsight oracle, a solved table.
- ``online_rl.py``: PPO (stable-baselines3) trained online in the environment itself, its gate and its learning
  curve; ``online_env.py``: the episode loop as a ``gymnasium`` environment for it.
- ``exact_optimal.py``: the exact optimum on the simulator's true model (``exact_optimal``).
- ``knn.py``: the failure rate of the nearest training decision points by the sentence encoder, and its
  out-of-fold score of every training row (``knn``).
- ``threshold_levels.py``: the threshold baselines at full strength: the level for each cap chosen on the training
  folds, and the levels that spend 1, 2, ... an episode with no cap.
- ``tiered_baselines.py``: the baselines of a helper that chooses which help to call: one helper per kind, a
  cascade, a random kind and always the dearest kind.
- ``registry.py``: ``GATES``, every gate class above by the name its rows carry, loaded on first use.

What the gates read and check:

- ``features.py``: a decision point's numeric features, and the features-backend classifier;
  ``text_classifier.py``: the text-backend classifier; ``kind_classifier.py``: the tiered helper's classifier of
  the kind to call.
- ``identity.py`` / ``trained_on.py``: what makes a helper folder one unit, and the check that it runs on the kind
  of episodes it was trained on; ``stored_values.py``: ``helper.json``'s values range-checked on load.
- ``member_files.py``: the member each cap of a helper folder plays, read back on load.
- ``certify.py``: ``helpgate calibrate``'s statistics (exact binomial tests in a fixed sequence) and the guarantee
  record a helper folder carries.
- ``training_folds.py``: the units the training folds keep whole (the helper's member choice and the baselines'
  calibration folds).
"""

# HelperGate.load hands a folder naming kinds to TieredHelperGate, which it finds among its subclasses: importing the
# room here (above both) makes the subclass known wherever helper.gates is imported, with no arrow back into
# helper_gate.py.
from helper.gates import tiered_helper_gate  # noqa: E402,F401
