"""Commands that join the stages.

- ``cli.py``: ``helpgate``: one subcommand per stage, each generated from its config dataclass.
- ``pipeline.py``: ``helpgate pipeline``: every stage end to end in one folder, resumable.
"""
