"""Agents and actors: anything that maps observations to actions.

- ProductQA's LLM agent is the AGILE executor's policy (``agile.executor.episode.AgileAgent``,
  ``agile.executor.policy.LLMPolicy``); ``prompt_cache.py`` reuses key/value caches of shared prompt
  prefixes on CPU, for it and the TextWorld agent; ``batch_forward.py`` runs many prompts' forwards at once,
  each on its own cached past (a lockstep round's prefills and packed candidate scoring).
- ``simulator_agent.py``: known dynamics (accuracy per question type).
- ``oracle_agent.py``: the human (the gold answer) wherever an agent is expected.
- ``textworld_agents.py``: TextWorld's simulator and LLM agents.
- ``openai_agent.py``: an agent behind an OpenAI-compatible endpoint (the executor's context as its prompt).
- ``human_agent.py``: a person at the terminal (``--strong human-cli``).
"""
