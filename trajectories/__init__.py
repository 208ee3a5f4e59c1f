"""The offline dataset: one row per decision point, in Parquet shards. The floor of the house:
``agile``, ``prm`` and ``helper`` all read and write trajectories through it, and it imports
nothing of theirs.

- ``schema.py``: the columns and their types, and the rules a frame of them must keep.
- ``number_maps.py``: the typed ``features`` and ``proposal_signals`` columns (numbers by name per
  row): to dicts and back, and the JSON text of older shards read as typed.
- ``rows.py``: the one row builder (``StepRecord``) and rows as a shard's frame (``frame_of``).
- ``shards.py``: finding, reading and writing shards (validated, atomic).
- ``manifest.py``: what a folder's finished shards are, for resuming and for checking a folder.
- ``files.py``: files written whole or not at all; JSON objects read back with a one-line refusal.
"""
