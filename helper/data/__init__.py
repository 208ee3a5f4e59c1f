"""Collecting trajectories: one row per decision point, written through ``trajectories``.

- ``environment.py``: the one builder of an environment's episodes, base agent and strong actor
  (``EnvSpec``), for collection and online evaluation alike.
- ``env_kinds.py``: what differs per environment (ProductQA, TextWorld, a plug-in), one entry each.
- ``plugins.py``: envs and agents of the user's own (``module:factory`` or an entry point).
- ``plugin_limits.py``: what a plug-in may not do to a run: hang (a time limit per call), run past its horizon,
  exit, or return the wrong thing.
- ``help_kinds.py``: several kinds of help on collection's command line (``--help-kinds NAME:PRICE``, caps,
  weights): parsed, checked, resolved to who answers each.
- ``collect.py``: ``collect-offline-trajectories``: random interventions, resumable shards.
- ``ray_collect.py``: the same shards spread over Ray workers.
- ``recorder.py``: ``Recorder``, for an agent that runs its own loop.
"""
