"""The AGILE agent: a policy that emits function tokens (``agile.functions``), run by an executor.

- ``executor.py``: runs the tokens (memory, search, reflection, seek advice) over a session.
- ``memory.py``: retrieval memory (sentence embeddings).
- ``reflection.py``: what the agent writes back into memory.
- ``policy.py``: the LLM policy that chooses the next function token.
- ``constrained.py``: constrained decoding: the function and the answer's form chosen by log-probability
  (sensible turns from a model with no SFT); ``sql_grammar.py``: the queries it may write.
- ``choice_head.py``: a linear head on the choice state that moves ``[SeekAdvice]``'s score (PPO's choice head),
  and the threshold on the ask score that sets an advice rate.
- ``consistency.py``: self-consistency: k turns sampled beside the greedy one, read as two signals or a vote.
- ``self_consistency.py``: the compute help: the majority turn of k samples, on the base agent's model.
- ``lexical.py``: lexical retrieval for the memory (shared content words, no model).
- ``episode.py``: the agent's sessions as ``agile.protocol`` episodes, for the episode loop.
- ``scores.py``: accuracy, advice rate, total score = accuracy - c * advice rate (their one home).
- ``agent_eval.py``: the agent's evaluation per group, ablations, a given gate beside its own advice.
"""
