"""The gate: from scored trajectories to the ``HelperGate`` an agent calls at each decision point.

- ``solve_command.py``: ``helpgate solve``: the budgeted MDP solved, optimal labels per budget;
  ``solve_files.py``: what a solve folder holds, read as one unit.
- ``distill.py``: ``helpgate distill``: the helper classifier trained on those labels; ``select.py``: the member
  each cap plays (the solved table, its variants or the threshold on the same score), chosen on the training folds
  (``training_folds.py``: the units those folds, and the baselines' calibration folds, keep whole).
- ``features.py``: a decision point's numeric features, and the features-backend classifier;
  ``text_classifier.py``: the text-backend classifier.
- ``gate.py``: ``HelperGate``: load a helper folder, decide within the budget; ``choose`` names the help to call.
- ``tiered_solve.py``: ``helpgate solve --help-kinds``: which help to call, each kind at its price, under a cost budget
  (tables and ``optimal_kind`` labels per budget); ``tiered_gate.py``: ``TieredHelperGate``, the helper that plays
  that table or a ``KindClassifier`` (``kind_classifier.py``; ``HelperGate.load`` returns one for a folder naming
  kinds); ``tiered_distill.py``: ``helpgate distill`` on a tiered solve. What both solves and both distills read the
  same way: ``solve_inputs.py`` (default budgets, an episode's one outcome, the back-off flag, each row's own
  outcome), ``distill_inputs.py`` (the held-out episodes, the PRM's decision point).
- ``identity.py`` / ``trained_on.py``: what makes a helper folder one unit, and the check that it
  runs on the kind of episodes it was trained on; ``stored_values.py``: ``helper.json``'s values
  range-checked on load.
- ``certify.py``: ``helpgate calibrate``'s statistics (exact binomial tests in a fixed sequence) and the
  guarantee record (the command: ``helper.commands.calibrate``); ``priced_family.py``: its priced family (the
  helper's own solve with a price per intervention, most help first) and the gate a guarantee covers;
  ``tiered_family.py``: its family for a tiered helper (the table at each cost budget, each member played with the
  folder's kinds).
"""

# HelperGate.load hands a folder naming kinds to TieredHelperGate, which it finds among its subclasses: importing the
# room here (above both) makes the subclass known wherever helper.gate is imported, with no arrow back into gate.py.
from helper.gate import tiered_gate  # noqa: E402,F401
