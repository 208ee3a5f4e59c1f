"""The budgeted solvers: from an estimated ``TabularModel`` to a ``Solution`` (a policy table).

    from tabular_rl.solvers import solve
    sol = solve(model, budget=3, method="exact")     # or "lagrangian", "lp"

The rooms:

- ``solve.py``: ``solve`` and ``SOLVERS``, the one entry point that picks a solver by name.
- ``exact.py``: ``solve_exact``, backward induction over (step, state, budget left): a hard budget,
  never exceeded.
- ``lagrangian.py``: ``solve_lagrangian``, a price per intervention bisected until it spends the
  budget in expectation (a mixture of two deterministic policies).
- ``lp.py``: ``solve_lp``, the occupancy-measure linear program, budget in expectation.
- ``priced.py``: ``solve_priced`` (a fixed price per intervention, no budget; ``advice_price`` turns an
  advice cost into that price) and ``solve_spending`` (the price that spends a target).
- ``pessimism.py``: an intervention taken only where its own gain clears z standard errors
  (``solve_exact(..., pessimism=z)``).
"""

from .exact import solve_exact
from .lagrangian import solve_lagrangian
from .lp import solve_lp
from .priced import advice_price, solve_priced, solve_spending
from .solve import SOLVERS, solve

__all__ = ["SOLVERS", "advice_price", "solve", "solve_exact", "solve_lagrangian", "solve_lp", "solve_priced",
           "solve_spending"]
