"""Baselines that learn or solve (the simple gates are ``agile.gates``, one registry for all).

- ``online_rl.py``: PPO (stable-baselines3) trained online in the environment itself, and its
  learning curve;
  ``online_env.py``: the episode loop as a ``gymnasium`` environment for it.
- ``exact.py``: the exact optimum on the simulator's true model (``exact_optimal``).
- ``knn.py``: the failure rate of the nearest training decision points by the sentence encoder, and its
  out-of-fold score of every training row (``knn``).
- ``threshold_levels.py``: the threshold baselines at full strength: the level for each cap chosen on the training
  folds, and the levels that spend 1, 2, ... an episode with no cap.
- ``tiered.py``: the baselines of a helper that chooses which help to call: one helper per kind, a cascade and a
  random kind, each a table the tiered gate plays.
"""
