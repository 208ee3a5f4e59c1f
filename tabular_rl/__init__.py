"""tabular_rl: discretize, estimate and solve for the best helper under an intervention budget.

Pure numpy / scipy / polars. From a scored offline dataset (one row per decision point) to an
optimal intervention policy and a label for every logged row::

    import polars as pl
    from tabular_rl import Discretizer, estimate, solve, label

    df = pl.read_parquet("runs/default/trajectories/*.parquet")
    disc = Discretizer(bins=10, binning="quantile").fit(df["prm_score"], df["step"])
    model = estimate(df, disc)                        # back-off weight chosen from the data
    sol = solve(model, budget=3, method="exact")     # or "lagrangian", "lp"
    labelled = label(df, sol)                         # adds optimal_intervene

The rooms, in the order the data meets them:

- ``transitions.py``: logged rows -> flat transition arrays (step, state, action, next state, reward).
- ``columns.py``: the dataset's column names every room reads (``Columns``).
- ``discretize.py``: ``Discretizer``: PRM score (and step) -> a small integer state;
  ``supervised_bins.py``: score edges where the outcome changes.
- ``aligned.py``: steps counted from each episode's end where horizons differ and the horizon is a deadline.
- ``estimate.py``: count-based model estimation, P(s' | step, s, a), mean reward, start distribution;
  ``stationary.py``: the same model under two assumptions (a state's risk pooled over steps, the next state a
  draw of the step), one member of the helper's family (``choice/``); ``smooth.py``: the same with a state's risk
  on a curve over step and score (a member, and half of what fills the judge's thin cells).
- ``solvers/``: the budgeted solvers behind one entry point, ``solve``: exact backward induction over
  the budget left, Lagrangian (a price per intervention), occupancy LP (budget in expectation), priced
  (a fixed price, no budget), and pessimism (an intervention taken only where its gain clears z
  standard errors); the wing's own map names its rooms.
- ``solution.py``: ``Solution``, what every solver returns, its lookups and persistence.
- ``label.py``: optimal labels for logged rows.
- ``evaluate.py``: exact evaluation of a policy in a model; ``simulate.py``: a model rolled out into rows.
- ``tiered/``: which of several kinds of help to call, each at its price, under a cost budget and
  per-kind caps (its own model, estimator, exact and Lagrangian solvers; the wing's map names its rooms).
- ``choice/``: the helper's family of members and the choice among them on training folds (replayed or judged),
  and a whole solve cross-validated on held-out episodes; the wing's map names its rooms.
"""

from .discretize import Discretizer
from .estimate import MissingActionError, TabularModel, estimate, estimate_from_transitions
from .evaluate import Evaluation, evaluate, policy_values
from .label import label
from .simulate import simulate
from .solution import Solution
from .solvers import SOLVERS, solve, solve_exact, solve_lagrangian, solve_lp
from .transitions import Columns, Transitions, extract_transitions

__all__ = [
    "SOLVERS",
    "Columns",
    "Discretizer",
    "Evaluation",
    "MissingActionError",
    "Solution",
    "TabularModel",
    "Transitions",
    "estimate",
    "estimate_from_transitions",
    "evaluate",
    "extract_transitions",
    "label",
    "policy_values",
    "simulate",
    "solve",
    "solve_exact",
    "solve_lagrangian",
    "solve_lp",
]
