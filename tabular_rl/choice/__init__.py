"""The helper's family and the choice among its members, on training folds only.

- ``members.py``: the family (the solved table, its variants, the threshold on the same score, priced tables) and
  ``fit_member``.
- ``selection.py``: ``cross_fitted``, each member fitted without the fold it is read on, and the choice per cap.
- ``replay.py``: a fold read by replaying its logged episodes, where decisions are separate questions.
- ``judge.py``: a fold read through its own model, where a decision changes what comes next.
- ``carried.py``: the judge's state extended with whether an earlier step failed, where an episode carries a
  failure to its end.
- ``held_out.py``: a whole solve cross-validated on logged episodes it was not fitted on.
"""
