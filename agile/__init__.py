"""agile: the agent side of helpgate. Imports nothing of the project but the ``trajectories`` floor.

The core rooms, and four wings by purpose:

- ``protocol.py``: the contracts (Observation, Action, Episode, Agent, Gate).
- ``functions.py``: the AGILE function tokens and how a turn is parsed: the language the executor
  runs and every ProductQA agent writes (the local policy, the OpenAI-compatible client, SFT data).
- ``rollout.py``: the one episode loop (``run_episodes``), lockstep, budgeted, counterfactual.
- ``budget.py``: the one budget: ``EpisodeBudget``, the per-episode intervention count the loop, the
  executor and every gate (``BudgetedGate``, the base of ``helper.gates``) keep, and the default largest budget.
- ``tiered_budget.py``: ``TieredBudget``, the same count with kinds of help: a cost budget per episode and per-kind
  caps, each spend checked under one lock (the tiered gate and its server keep it).
- ``helps.py``: kinds of help, each at its price and cap (``Help``), the cost an episode spent on them
  (``HelpSpend``), the draw of which kind to call, and the plug-in contract for an episode's own kinds.
- ``models.py``: model loading (embedded SmolLM2, tiny test models, any Hugging Face id or folder).
- ``seeding.py``: seeds and reproducible draws.
- ``envs/``: ProductQA (data, SQL table, generator, answers) and TextWorld.
- ``agents/``: base agents, strong actors, the OpenAI-compatible client, a human at the terminal.
- ``executor/``: the AGILE agent: policy, executor, memory, reflection, its evaluation.
- ``train/``: SFT, session-level PPO, advantages, the ``helpgate agile`` commands.
"""
