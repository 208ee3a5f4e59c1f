"""Training the AGILE agent.

- ``sft_data.py`` / ``sft.py``: imitation data from sessions, and supervised fine-tuning.
- ``advantages.py``: session-level returns and advantages.
- ``ppo.py``: session-level PPO with a KL penalty to the reference policy.
- ``choices.py``: PPO over the constrained policy's function choices (``decoding = "constrained"``).
- ``checkpoint.py``: PPO's per-iteration checkpoint: a stopped run goes on with the same draws.
- ``data_parallel.py``: equal optimizer steps on every process of an ``accelerate`` run.
- ``command.py``: the ``helpgate agile sft|ppo`` configs and entry points.
"""
