"""``prm score --ray``: spread shards over Ray workers, each loading the PRM once.

One worker per GPU when the cluster has GPUs, else one single-threaded CPU worker per CPU. A
worker scores a shard and writes it atomically; the driver alone updates the progress manifest
as results arrive, so a killed run resumes exactly like the in-process one.

The per-shard function comes from the caller (``prm.scoring.score.score_shard``), so this module imports
nothing of ``prm.scoring.score`` and the two do not import each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


class ShardScorer:
    """A Ray actor body: holds one loaded PRM and scores whole shards with it."""

    def __init__(
        self, score_shard, model: str, device: str, dtype: str | None, max_length: int | None, batch_tokens: int,
        validate=None,
    ):
        import torch

        from prm.verifiers.load import load_prm
        from prm.verifiers.model import parse_dtype

        if device == "cpu":
            # Ray gives a CPU worker one core; more torch threads would only contend with peers.
            torch.set_num_threads(1)
        self.prm = load_prm(model, device=device, dtype=parse_dtype(dtype), merge_lora=True)
        if max_length:
            self.prm.settings.max_length = max_length
        self.score_shard = score_shard
        self.batch_tokens = batch_tokens
        self.validate = validate
        # Training episodes get the out-of-fold scores `prm train` saved, as in-process scoring does.
        from prm.data.episodes import OOF_FILE

        self.out_of_fold = Path(model) / OOF_FILE

    def score(self, source: str, target: str) -> tuple[str, dict]:
        return target, self.score_shard(self.prm, source, target, self.batch_tokens, self.validate, progress=False,
                                           out_of_fold=self.out_of_fold)


def score_with_ray(cfg, jobs: list[tuple[Path, Path]], score_shard, validate=None) -> Iterator[tuple[Path, dict]]:
    """Yield ``(target, stats)`` for each shard scored by ``score_shard(prm, source, target, batch_tokens,
    validate, progress=False)`` as workers finish them."""
    try:
        import ray
        from ray.util import ActorPool
    except ImportError as error:
        raise ImportError("--ray needs Ray: pip install 'helpgate[ray]' (or run without --ray).") from error
    from tqdm.auto import tqdm

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=cfg.ray_address, include_dashboard=False, log_to_driver=False)
    try:
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        use_gpu = gpus > 0 and (cfg.device is None or str(cfg.device).startswith("cuda"))
        wanted = cfg.ray_workers or (gpus if use_gpu else int(resources.get("CPU", 1)))
        n_workers = max(1, min(wanted, len(jobs)))
        worker = ray.remote(num_gpus=1 if use_gpu else 0, num_cpus=1)(ShardScorer)
        device = "cuda" if use_gpu else "cpu"
        actors = [
            worker.remote(score_shard, cfg.model, device, cfg.dtype, cfg.max_length, cfg.batch_tokens, validate)
            for _ in range(n_workers)
        ]
        pool = ActorPool(actors)
        tokens = 0
        with tqdm(
            total=len(jobs), unit="shard", desc=f"prm score ({n_workers} Ray workers)", disable=not cfg.progress
        ) as bar:
            results = pool.map_unordered(lambda actor, job: actor.score.remote(str(job[0]), str(job[1])), jobs)
            for target, stats in results:
                tokens += stats["tokens"]
                bar.set_postfix(tok_per_s=f"{tokens / max(bar.format_dict['elapsed'], 1e-9):.0f}")
                bar.update(1)
                yield Path(target), stats
        for actor in actors:
            ray.kill(actor)
    finally:
        if started_here:
            ray.shutdown()
