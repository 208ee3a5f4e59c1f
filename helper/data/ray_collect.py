"""``collect-offline-trajectories --ray``: spread shards over Ray workers, each loading its agents once.

One worker per GPU when the agent or the strong actor is an LLM and the cluster has GPUs, else
one single-threaded CPU worker per CPU. A worker plays whole shards and sends their rows back;
the driver alone writes each shard (atomically) and the manifest, as results arrive, so a killed
run resumes exactly like the in-process one. Episode ``i`` is fixed by ``(seed, i)`` whatever
worker plays it, so the folder is the same as the in-process run's.

Collection hands in its own two functions (build the environment, play a shard): this module
never imports ``helper.data.collect``, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace


class ShardCollector:
    """A Ray actor body: builds the environment and actors once, then plays whole shards."""

    def __init__(self, config, env_setup: Callable, collect_shard: Callable, actors: Callable):
        if config.spec.device == "cpu":
            import torch

            # Ray gives a CPU worker one core; more torch threads would only contend with peers.
            torch.set_num_threads(1)
        self.config = config
        self.setup = env_setup(config)
        self.collect_shard = collect_shard
        self.make_actors = actors
        self.actors = None

    def collect(self, k: int):
        if self.actors is None:
            self.actors = self.make_actors(self.setup, self.config)
        return k, self.collect_shard(self.setup, self.config, k, *self.actors)


def require_ray():
    """The ``ray`` module, or an error that says how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError("--ray needs Ray: pip install 'helpgate[ray]' (or run without --ray).") from error
    return ray


def collect_with_ray(config, shards: list[int], env_setup: Callable, collect_shard: Callable, actors: Callable
                     ) -> Iterator[tuple[int, object]]:
    """Yield ``(shard index, rows)`` for each shard of ``shards`` as workers finish them; each worker
    builds ``env_setup(config)`` and ``actors(setup, config)`` (base, strong or helps) once and plays a shard with
    ``collect_shard(setup, config, k, base, strong)``."""
    ray = require_ray()
    from ray.util import ActorPool

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=config.ray_address, include_dashboard=False, log_to_driver=False)
    try:
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        llm = config.spec.agent == "llm" or config.spec.strong != "human"
        use_gpu = llm and gpus > 0 and (config.spec.device is None or str(config.spec.device).startswith("cuda"))
        wanted = config.ray_workers or (gpus if use_gpu else int(resources.get("CPU", 1)))
        n_workers = max(1, min(wanted, len(shards)))
        worker = ray.remote(num_gpus=1 if use_gpu else 0, num_cpus=1)(ShardCollector)
        worker_config = replace(config, spec=replace(config.spec, device="cuda" if use_gpu else "cpu"), ray=False)
        workers = [worker.remote(worker_config, env_setup, collect_shard, actors) for _ in range(n_workers)]
        pool = ActorPool(workers)
        yield from pool.map_unordered(lambda actor, k: actor.collect.remote(k), shards)
        for actor in workers:
            ray.kill(actor)
    finally:
        if started_here:
            ray.shutdown()
