"""The offline dataset: one row per decision point, in Parquet shards. The floor of the house:
``agile``, ``prm`` and ``helper`` all read and write trajectories through it, and it imports
nothing of theirs.

- ``schema.py``: the columns and their types, and the rules a frame of them must keep.
- ``number_maps.py``: the typed ``features`` and ``proposal_signals`` columns (numbers by name per
  row): to dicts and back, and the JSON text of older shards read as typed.
- ``rows.py``: the one row builder (``StepRecord``) and rows as a shard's frame (``frame_of``).
- ``shards.py``: finding, reading and writing shards (validated, atomic).
- ``manifest.py``: what a folder's finished shards are, for resuming and for checking a folder.
- ``helps.py``: the kinds of help a collection called (prices, caps) as its manifest records them, and the spend
  its rows must keep.
- ``manifest_fields.py``: the types of a manifest's fields, checked when it is read.
- ``content.py``: each shard's SHA-256 as its manifests recorded it; a shard whose bytes differ is refused.
- ``scored_by.py``: which PRM scored each shard; a folder read for its scores is one PRM's, none pending.
- ``outputs.py``: where a command may write: never '', its own input, or another run's folder.
- ``files.py``: files written whole or not at all, and their hashes; JSON objects read back with a one-line
  refusal.
"""
