"""tabular_rl.tiered: the helper chooses which help to call, each kind at its price, under a cost budget.

The two-action rooms of ``tabular_rl`` decide *whether* to intervene; this wing decides *which* of K
kinds of help to call (more compute, a stronger model, a human), each with a price per call and an
optional cap on its calls, under a total budget per episode::

    from tabular_rl import Discretizer
    from tabular_rl.tiered import Resources, estimate_tiered, solve_tiered

    model = estimate_tiered(df, disc, kinds=("compute", "stronger", "human"))   # rows carry help_kind
    resources = Resources.of(prices=(1, 2, 4), budget=6, caps=(None, None, 1), horizon=model.horizon)
    sol = solve_tiered(model, resources)                # or method="lagrangian" for large tables
    sol.kind(step=3, state=2, budget_left=6, calls_left={"human": 1})   # -> "stronger", or None: the agent acts

The rooms:

- ``resources.py``: ``Resources``, the resource state (budget left in cost units, calls left per capped
  kind) and which actions it can afford; ``cost_units`` makes fractional prices whole.
- ``mdp.py``: ``TieredModel``, the MDP with K + 1 actions (0 = the agent acts).
- ``estimate.py``: ``estimate_tiered``, the count-based estimator of ``tabular_rl.estimate`` on rows
  that name the help they called (``help_kind``).
- ``exact.py``: ``solve_tiered_exact``, backward induction over (step, state, resource state).
- ``lagrangian.py``: ``solve_tiered_lagrangian``, one multiplier on cost bisected to a target spend,
  the resource state kept out of the solve and enforced when played.
- ``evaluate.py``: exact evaluation of a table; ``check_table`` refuses one that could overspend.
- ``solution.py``: ``TieredSolution``, the tables and the gate's lookup (``kind``).
- ``label.py``: ``label_tiered``, the kind the solved helper calls at each logged row (its resource state
  rebuilt from the episode's earlier logged calls).
- ``simulate.py``: a tiered model rolled out episode by episode, each episode's spend and calls counted.
"""

from .estimate import estimate_tiered, help_kind_actions
from .evaluate import TieredEvaluation, check_table, evaluate_table, table_values
from .exact import solve_tiered_exact
from .label import label_tiered, resource_states
from .lagrangian import solve_tiered_lagrangian
from .mdp import TieredModel
from .resources import Resources, cost_units
from .simulate import simulate_tiered
from .solution import TieredSolution

TIERED_SOLVERS = {"exact": solve_tiered_exact, "lagrangian": solve_tiered_lagrangian}


def solve_tiered(model: TieredModel, resources: Resources, method: str = "exact") -> TieredSolution:
    """Best table under ``resources``: ``exact`` (optimal, hard budget and caps) or ``lagrangian`` (the
    budget spent in expectation by a mixture of two guarded tables; budget and caps still hard)."""
    if method not in TIERED_SOLVERS:
        raise ValueError(f"method={method!r}: choose one of {', '.join(TIERED_SOLVERS)}")
    return TIERED_SOLVERS[method](model, resources)


__all__ = ["TIERED_SOLVERS", "Resources", "TieredEvaluation", "TieredModel", "TieredSolution", "check_table",
           "cost_units", "estimate_tiered", "evaluate_table", "help_kind_actions", "label_tiered",
           "resource_states", "simulate_tiered",
           "solve_tiered", "solve_tiered_exact", "solve_tiered_lagrangian", "table_values"]
