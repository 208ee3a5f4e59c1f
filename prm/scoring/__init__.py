"""A trained PRM's scores, for a trajectory folder or for a gate at decision time.

- ``score.py``: ``helpgate prm score`` (``ScoreConfig`` / ``run_score``): add ``prm_score`` to a
  trajectory folder (training episodes: their out-of-fold scores), streaming and resumable.
- ``ray_score.py``: ``prm score --ray``: the shards spread over Ray workers, each loading the PRM once.
- ``scorer.py``: ``PrmScorer``: the scorer a gate calls, one decision point at a time, caching per episode.
"""
