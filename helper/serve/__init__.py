"""Serving over HTTP (the ``serve`` extra: FastAPI, uvicorn).

- ``gate_server.py``: ``helpgate serve-gate``: one call per decision point, budgets kept by the server.
- ``chat_server.py``: ``helpgate serve``: a causal LM behind OpenAI-compatible chat completions.
- ``guard.py``: what both servers refuse before a request reaches a model.
- ``ledger.py``: ``serve-gate``'s budgets and answers in SQLite, kept across a crash and a restart;
  ``tiered_ledger.py``: the same with kinds of help (cost spent in cost units, each kind's calls and cap).
"""
