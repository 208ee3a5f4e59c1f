"""Environments: where episodes come from.

- ``productqa.py``: the ProductQA format (groups, questions, metadata) and its loader.
- ``product_db.py``: a group's products as an in-memory SQLite table for ``[SearchProduct]``.
- ``catalog_generator.py`` / ``catalog_templates.py``: the embedded generated catalog (same format).
- ``answer_eval.py``: whether an answer is right (short answers, product ids).
- ``sessions.py``: which session (group, questions) episode i of a split holds; the AGILE executor
  (``agile.executor``) runs them. ``scripted_answers.py``: the gold and plausible wrong answers a
  scripted agent gives; ``phrasing.py``: what a question's wording says (yes/no, content words).
- ``textworld_env.py`` / ``textworld_games.py``: generated TextWorld games as episodes.
"""
