"""Decision latency of ``HelperGate.should_intervene`` on CPU, per backend, against the bare classifier.

    python benchmarks/gate.py [--decisions 2000] [--text-model tiny] [--prm tiny] [--no-http | --http-only]

Builds, in this run, a features classifier (gradient boosting and logistic regression) on
simulated decision points, a text classifier (``--text-model``; ``tiny`` is a random-initialised
Llama with the real tokenizer, ``smollm2`` the embedded 135M model) and a solved table, then
times one ``should_intervene`` call per decision on fresh episode ids:

- ``features (gbm|logreg)``: PRM score from a precomputed lookup, so the row is the gate's own
  cost (feature row, budget bookkeeping, lock) plus the classifier;
- ``features + PRM``: the same with a real PRM (``--prm tiny``: random-initialised backbone)
  scoring the episode prefix at every decision;
- ``text``: one sequence-classifier forward per decision; ``table``: discretizer + table lookup.

The baseline, measured in the same run, is the bare ``predict_proba`` of the gradient-boosting
classifier on a prebuilt feature row; every line prints p50 / p99 in milliseconds and the p50
ratio against it (machines are noisy: compare ratios, not absolute times).

The gate as a service (``--http``, on by default): a helper folder with a gradient-boosting
classifier on the features alone (no PRM) is saved, served by ``helpgate serve-gate`` in its own
process on 127.0.0.1, and timed over HTTP (one keep-alive client, one request per decision, the
same observations) against ``HelperGate.load`` of the same folder called in this process. The
second table prints both, and the HTTP / in-process ratio of p50 and of p99.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa_env import make_episodes
from agile.protocol import Observation
from agile.rollout import run_episodes
from helper.features import FeatureClassifier, default_feature_names, frame_features, observation_features
from helper.gate import HelperGate


class LookupScorer:
    """The simulator's success probability: a PRM score that costs (almost) nothing."""

    def __init__(self):
        self.simulator = SimulatorAgent()

    def score(self, observation) -> float:
        return self.simulator.success_probability(observation)


def simulated(n_episodes: int, horizon: int = 8):
    import polars as pl

    agent = SimulatorAgent(seed=0)
    episodes = make_episodes(default_catalog_dir(0), "train", n=n_episodes, seed=3, questions_per_episode=horizon)
    records = run_episodes(episodes, agent, budget=horizon, explore_p=0.3, rng_seed=1)
    rows = [r.to_row() for episode in records for r in episode]
    frame = pl.DataFrame(rows).drop(["cf_base_success", "cf_intervene_success"])
    scores = [LookupScorer().simulator.accuracy[next(k[5:] for k, v in json.loads(f).items() if k.startswith("type_") and v)]
              for f in frame["features"]]
    frame = frame.with_columns(pl.Series("prm_score", scores))
    observations = [e.observe() for e in make_episodes(default_catalog_dir(0), "test", n=64, seed=9,
                                                       questions_per_episode=horizon)]
    return frame, observations


def timed(call, n: int) -> np.ndarray:
    out = np.empty(n)
    for i in range(n):
        start = time.perf_counter()
        call(i)
        out[i] = time.perf_counter() - start
    return out * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--text-model", default="tiny")
    parser.add_argument("--prm", default="tiny", help="PRM backbone for the 'features + PRM' line; 'none' skips it")
    parser.add_argument("--http", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the gate over HTTP (helpgate serve-gate) against the in-process call")
    parser.add_argument("--http-only", action="store_true", help="time only the HTTP / in-process comparison")
    args = parser.parse_args()

    from dataclasses import replace

    import torch

    torch.set_num_threads(1)  # one decision, one core: the figure a per-request server sees
    frame, observations = simulated(200)
    names = default_feature_names(frame)
    X = frame_features(frame, names)
    y = (frame["prm_score"].to_numpy() < 0.5) & (frame["budget_left"].to_numpy() > 0)
    classifiers = {m: FeatureClassifier(m, names).fit(X, y) for m in ("gbm", "logreg")}
    fallback_names = [n for n in names if n != "prm_score"]
    fallback = FeatureClassifier("logreg", fallback_names).fit(frame_features(frame, fallback_names), y)
    scorer = LookupScorer()
    n = args.decisions

    def obs(i):
        o = observations[i % len(observations)]
        return replace(o, episode_id=f"bench-{i}")  # a fresh episode each call: the budget never runs out

    if args.http or args.http_only:
        served = http_against_in_process(frame, y, observations, n)
        if args.http_only:
            print_http(served)
            return

    row = observation_features(observations[0], 2, 0.4, names)
    results = {"baseline: bare gbm predict_proba": timed(lambda i: classifiers["gbm"].predict_proba(row), n)}
    for model, classifier in classifiers.items():
        gate = HelperGate("features", classifier, fallback, scorer=scorer, budget=3, max_budget=3)
        results[f"features ({model})"] = timed(lambda i, gate=gate: gate.should_intervene(obs(i)), n)

    from tabular_rl import Discretizer, estimate, solve

    discretizer = Discretizer(bins=3).fit(frame["prm_score"], frame["step"])
    table = solve(estimate(frame, discretizer), 3)
    gate = HelperGate("table", table=table, discretizer=discretizer, scorer=scorer, budget=3)
    results["table"] = timed(lambda i: gate.should_intervene(obs(i)), n)

    from helper.text_classifier import TextClassifier, format_input

    texts = [format_input(s, t, h, b) for s, t, h, b in zip(frame["state_text"][:256], frame["step"][:256],
                                                           frame["horizon"][:256], frame["budget_left"][:256])]
    text = TextClassifier(args.text_model, max_length=512, epochs=1).fit(texts, y[:256])
    gate = HelperGate("text", text, budget=3, max_budget=3)
    results[f"text ({args.text_model})"] = timed(lambda i: gate.should_intervene(obs(i)), max(n // 10, 50))

    if args.prm != "none":
        from helper.prm_scorer import PrmScorer
        from prm.model import ProcessRewardModel

        prm = ProcessRewardModel.create(args.prm, tag_after="state", device="cpu")
        gate = HelperGate("features", classifiers["gbm"], fallback, scorer=PrmScorer(prm), budget=3, max_budget=3)
        results[f"features (gbm) + PRM ({args.prm})"] = timed(lambda i: gate.should_intervene(obs(i)),
                                                               max(n // 10, 50))

    base = np.percentile(results["baseline: bare gbm predict_proba"], 50)
    print(f"machine: {platform.processor() or platform.machine()}, torch threads 1, python {platform.python_version()}")
    print(f"{'decision call':40s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 / baseline':>15s}")
    for name, times in results.items():
        p50, p99 = np.percentile(times, [50, 99])
        print(f"{name:40s} {p50:8.3f} {p99:8.3f} {p50 / base:14.2f}x")
    if args.http:
        print()
        print_http(served)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_against_in_process(frame, y, observations, n: int) -> dict[str, np.ndarray]:
    """p50/p99 of one decision: ``HelperGate.load(dir)`` here, and ``serve-gate dir`` over HTTP."""
    import os
    import subprocess
    import tempfile

    import httpx

    names = [name for name in default_feature_names(frame) if name != "prm_score"]
    classifier = FeatureClassifier("gbm", names).fit(frame_features(frame, names), y)
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        # Without a PRM every decision takes the fallback classifier: here the same gbm.
        HelperGate("features", classifier, classifier, max_budget=3).save(tmp)
        gate = HelperGate.load(tmp, budget=3)

        def request(i):
            o = observations[i % len(observations)]
            return {"episode_id": f"bench-{i}", "step": o.step, "state_text": o.state_text, "features": o.features,
                    "horizon": o.horizon}

        def obs(i):
            o = observations[i % len(observations)]
            return Observation(f"bench-{i}", o.env, o.task_id, o.step, o.state_text, o.horizon, dict(o.features))

        # Fresh episode ids: the budget never runs out, so every call runs the classifier.
        for i in range(50):  # the same warm-up as the HTTP side gets
            gate.should_intervene(obs(n + i))
        in_process = timed(lambda i: gate.should_intervene(obs(i)), n)
        port = free_port()
        env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(root)}
        server = subprocess.Popen([sys.executable, "-m", "helper.cli", "serve-gate", "--helper", tmp, "--budget", "3",
                                   "--port", str(port)], cwd=root, env=env, stdout=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                for _ in range(600):  # up to 60 s for the server to load
                    try:
                        http.get("/health")
                        break
                    except httpx.TransportError:
                        time.sleep(0.1)
                for i in range(50):  # warm the connection and the server's code paths
                    http.post("/v1/gate", json=request(n + i)).raise_for_status()
                over_http = timed(lambda i: http.post("/v1/gate", json=request(i)).raise_for_status(), n)
        finally:
            server.terminate()
            server.wait(timeout=10)
    return {"in-process HelperGate.should_intervene": in_process, "HTTP POST /v1/gate (serve-gate)": over_http}


def print_http(results: dict[str, np.ndarray]) -> None:
    local, http = results.values()
    print("the gate as a service: features (gbm, no PRM), one client, keep-alive, 127.0.0.1")
    print(f"{'decision call':40s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for name, times in results.items():
        p50, p99 = np.percentile(times, [50, 99])
        print(f"{name:40s} {p50:8.3f} {p99:8.3f}")
    ratio50 = np.percentile(http, 50) / np.percentile(local, 50)
    ratio99 = np.percentile(http, 99) / np.percentile(local, 99)
    print(f"{'HTTP / in-process':40s} {ratio50:7.2f}x {ratio99:7.2f}x")


if __name__ == "__main__":
    main()
