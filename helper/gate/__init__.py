"""The gate: from scored trajectories to the ``HelperGate`` an agent calls at each decision point.

- ``solve_command.py``: ``helpgate solve``: the budgeted MDP solved, optimal labels per budget;
  ``solve_files.py``: what a solve folder holds, read as one unit.
- ``distill.py``: ``helpgate distill``: the helper classifier trained on those labels; ``select.py``: the member
  each cap plays (the solved table, its variants or the threshold on the same score), chosen on the training folds
  (``training_folds.py``: the units those folds, and the baselines' calibration folds, keep whole).
- ``features.py``: a decision point's numeric features, and the features-backend classifier;
  ``text_classifier.py``: the text-backend classifier.
- ``gate.py``: ``HelperGate``: load a helper folder, decide within the budget.
- ``identity.py`` / ``trained_on.py``: what makes a helper folder one unit, and the check that it
  runs on the kind of episodes it was trained on; ``stored_values.py``: ``helper.json``'s values
  range-checked on load.
- ``certify.py``: ``helpgate calibrate``'s statistics (exact binomial tests in a fixed sequence) and the
  guarantee record (the command: ``helper.commands.calibrate``); ``priced_family.py``: its priced family (the
  helper's own solve with a price per intervention, most help first) and the gate a guarantee covers.
"""
