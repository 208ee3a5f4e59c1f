"""The offline dataset: one row per decision point, in Parquet shards. The floor of the house:
``agile``, ``prm`` and ``helper`` all read and write trajectories through it, and it imports
nothing of theirs.

- ``shards.py``: the schema, validation, reading and atomic writing of shards, and the manifest
  that lets a killed run resume.
"""
