"""The AGILE agent: a policy that emits function tokens, run by an executor.

- ``functions.py``: the function tokens and their parsing.
- ``executor.py``: runs the tokens (memory, search, reflection, seek advice) over a session.
- ``memory.py``: retrieval memory (sentence embeddings).
- ``reflection.py``: what the agent writes back into memory.
- ``policy.py``: the LLM policy that chooses the next function token.
- ``metrics.py``: accuracy, advice rate, total score = accuracy - c * advice rate (their one home).
- ``evaluate.py``: evaluation per group, ablations.
"""
