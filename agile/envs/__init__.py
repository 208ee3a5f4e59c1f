"""Environments: where episodes come from.

- ``productqa.py``: the ProductQA format (groups, questions, metadata) and its loader.
- ``product_db.py``: a group's products as an in-memory SQLite table for ``[SearchProduct]``.
- ``catalog_generator.py`` / ``catalog_templates.py``: the embedded generated catalog (same format).
- ``answer_eval.py``: whether an answer is right (short answers, product ids).
- ``productqa_env.py``: ProductQA sessions as ``agile.protocol.Episode``s; ``session_memory.py`` is
  what a session remembers of earlier answers (it reads the executor's function tokens).
- ``textworld_env.py`` / ``textworld_games.py``: generated TextWorld games as episodes.
"""
