"""Evaluation: gates played online on held-out episodes, and what is reported of them.

- ``play.py``: ``helpgate evaluate``: one helper at several budgets (``evaluate_gate``).
- ``sweep.py``: ``helpgate sweep``: every method over the budgets; ``methods.py``: the registry
  of those methods, one class each; ``tiered_sweep.py``: the sweep of a helper that chooses which help to call,
  under cost budgets.
- ``metrics.py``: APGR, CPT, paired intervals: the one metrics module.
- ``spend.py``: the second yardstick: the priced helper against each threshold baseline's no-cap curve at its
  spend.
- ``plots.py``: the sweep figure.
- ``report.py``: ``helpgate report``: the headline table of finished runs.
- ``headline.py``: ``helpgate report --headline``: RESULTS' headline, one table of every set-up's committed
  report with its commit, machine and command.
- ``agile_advice.py``: ``helpgate agile eval --helper``: a helper decides the AGILE agent's advice.
- ``advice_join.py``: the AGILE advice comparison (the helper against PPO's own advice, NoveltyGate
  and random) as report rows.
"""
