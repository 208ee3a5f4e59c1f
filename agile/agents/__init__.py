"""Agents and actors: anything that maps observations to actions.

- ``llm_agent.py``: the ProductQA LLM base agent (function tokens, batched); ``prompt_cache.py``
  reuses key/value caches of shared prompt prefixes on CPU.
- ``simulator_agent.py``: known dynamics (accuracy per question type).
- ``oracle_agent.py``: a stronger LLM as the strong actor.
- ``textworld_agents.py``: TextWorld's simulator and LLM agents.
- ``openai_agent.py``: the same prompts behind an OpenAI-compatible endpoint.
- ``human_agent.py``: a person at the terminal (``--strong human-cli``).
"""
