"""The trajectories as the PRM's training data: what it reads of them, its labels, its folds.

- ``episodes.py``: the trajectory columns the PRM reads, and episodes as the sequences it renders.
- ``labels.py``: Monte-Carlo labels for every decision point, and the train/validation split by episode.
- ``folds.py``: ``assign_folds``: folds of whole episodes, by task group, prefix-sharing episodes together.
- ``synthetic.py``: synthetic trajectories with a known answer, for tests, benchmarks and smoke runs.
- ``export.py``: ``helpgate prm export``: the trajectories as a PRM dataset for other trainers
  (TRL's stepwise supervision: prompt, completions, labels).
"""
