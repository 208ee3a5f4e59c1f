"""The helper's training: from scored trajectories to the solved tables and the distilled classifier a gate plays
(the gate itself is ``helper.gates``).

- ``solve_command.py``: ``helpgate solve``: the budgeted MDP solved, optimal labels per budget;
  ``solve_files.py``: what a solve folder holds, read as one unit.
- ``distill.py``: ``helpgate distill``: the helper classifier trained on those labels; ``select.py``: the member
  each cap plays (the solved table, its variants or the threshold on the same score), chosen on the training folds
  (``helper.gates.training_folds``: the units those folds, and the baselines' calibration folds, keep whole).
- ``tiered_solve.py``: ``helpgate solve --help-kinds``: which help to call, each kind at its price, under a cost budget
  (tables and ``optimal_kind`` labels per budget); ``tiered_distill.py``: ``helpgate distill`` on a tiered solve.
  What both solves and both distills read the same way: ``solve_inputs.py`` (default budgets, an episode's one
  outcome, the back-off flag, each row's own outcome), ``distill_inputs.py`` (the held-out episodes, the PRM's
  decision point).
- ``priced_family.py``: ``helpgate calibrate``'s priced family (the helper's own solve with a price per
  intervention, most help first) and the gate a guarantee covers; ``tiered_family.py``: its family for a tiered
  helper (the table at each cost budget, each member played with the folder's kinds).
"""
