"""Decision latency of ``HelperGate.should_intervene`` on CPU, per backend, against the bare classifier.

    python benchmarks/trust/gate.py [--decisions 2000] [--text-model tiny] [--prm tiny] [--no-http | --http-only]
                              [--large-senders 2] [--large-mb 4]

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

Large bodies (``--http``, third table): a helper folder that reads a real PRM (``--prm``, ``tiny`` by
default) is served by ``serve-gate`` with its default body limit (1 MiB). Small requests (one
keep-alive client, fresh episode ids) are timed on distinct states (a PRM forward pass each), on the
cache hit path (the same states again: the scorer's memo answers), and on the cache hit path while
``--large-senders`` clients, each in its own process, post ``--large-mb`` MB bodies back to back.
Each 413 is timed twice: when its first byte arrives (the server's answer; the default raw-socket
sender reads while it writes) and when the body is written and the reply read (what a client that
writes first waits; ``--large-client httpx`` times that client, whose own write loop adds its
cost). The goal: 413 in under 100 ms, and small requests keep their latency.

Trust (``--trust``, on by default; ``--trust-only`` alone, no model needed): a helper folder (no PRM) that wants every
decision is served by ``serve-gate`` on a ledger (``helper.serve.ledger``), killed with SIGKILL mid-traffic
``--kill-rounds`` times and restarted on the same ledger; the baseline, in the same run, restarts each time on a fresh
ledger, as a server that kept budgets in memory did. The fourth table gives, for both, the interventions granted and
the episodes granted more than their budget (the goal: 0 with the ledger), then the bad requests and starts
``serve-gate`` must refuse (an episode id with ``/`` or of 300 KB, a step of 10^18 or past the horizon at
``/actions``, a port in use) and what it must survive (a guarantee.json cut short, an episode idle past
``--idle-episode-s``): each with what it answered.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agile.agents.simulator_agent import SimulatorAgent
from agile.protocol import Observation
from agile.rollout import run_episodes
from helper.data.environment import EnvSetup, EnvSpec
from helper.gates.features import FeatureClassifier, default_feature_names, frame_features, observation_features
from helper.gates.helper_gate import HelperGate
from prm.data.folds import task_type


class LookupScorer:
    """The simulator's success probability: a PRM score that costs (almost) nothing."""

    def __init__(self):
        self.simulator = SimulatorAgent()

    def score(self, observation) -> float:
        return self.simulator.success_probability(observation)


def simulated(n_episodes: int, horizon: int = 8):
    """Decision points of the simulator on ProductQA's executor (the embedded catalog, no LLM): a logged
    frame of ``n_episodes`` training episodes, and observations of 64 test episodes to time the gates on."""
    import polars as pl

    setup = EnvSetup(EnvSpec(env="productqa", agent="simulator", questions_per_episode=horizon), split="train")
    records = run_episodes(setup.episodes(range(n_episodes), seed=3), setup.base_agent(), budget=horizon,
                           explore_p=0.3, rng_seed=1)
    rows = [r.to_row() for episode in records for r in episode]
    frame = pl.DataFrame(rows).drop(["cf_base_success", "cf_intervene_success"])
    # The question type is an annotation, never a logged feature: read it back from the task id.
    accuracy = LookupScorer().simulator.accuracy
    scores = [accuracy[task_type(t)] for t in frame["task_id"]]
    frame = frame.with_columns(pl.Series("prm_score", scores))
    observations = [e.observe() for e in setup.episodes(range(64), seed=9, split="test")]
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
    parser.add_argument("--large-senders", type=int, default=2, help="clients posting large bodies at once")
    parser.add_argument("--large-mb", type=float, default=4.0, help="size of each large body in MB")
    parser.add_argument("--large-client", choices=("socket", "httpx"), default="socket",
                        help="senders of large bodies: a raw socket (reads the reply while writing) or httpx")
    parser.add_argument("--trust", action=argparse.BooleanOptionalAction, default=True,
                        help="also kill serve-gate mid-traffic and send it bad requests (the fourth table)")
    parser.add_argument("--trust-only", action="store_true", help="only the trust table")
    parser.add_argument("--kill-rounds", type=int, default=3, help="SIGKILLs mid-traffic per server life cycle")
    args = parser.parse_args()
    if args.trust_only:
        print_trust(serving_trust(args.kill_rounds))
        return
    trust = serving_trust(args.kill_rounds) if args.trust else None

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
        large = http_under_large_bodies(frame, y, observations, n, args.prm, args.large_senders, args.large_mb,
                                        args.large_client)
        if args.http_only:
            print_http(served)
            print()
            print_large(large, args.large_senders, args.large_mb, args.large_client)
            return

    row = observation_features(observations[0], 2, 0.4, names)
    results = {"baseline: bare gbm predict_proba": timed(lambda i: classifiers["gbm"].predict_proba(row), n)}
    for model, classifier in classifiers.items():
        gate = HelperGate("features", classifier, fallback, scorer=scorer, budget=3, solved_budget=3)
        results[f"features ({model})"] = timed(lambda i, gate=gate: gate.should_intervene(obs(i)), n)

    from tabular_rl import Discretizer, estimate, solve

    discretizer = Discretizer(bins=3).fit(frame["prm_score"], frame["step"])
    table = solve(estimate(frame, discretizer), 3)
    gate = HelperGate("table", table=table, discretizer=discretizer, scorer=scorer, budget=3)
    results["table"] = timed(lambda i: gate.should_intervene(obs(i)), n)

    from helper.gates.text_classifier import TextClassifier, format_input

    texts = [format_input(s, t, h, b) for s, t, h, b in zip(frame["state_text"][:256], frame["step"][:256],
                                                           frame["horizon"][:256], frame["budget_left"][:256])]
    text = TextClassifier(args.text_model, max_length=512, epochs=1).fit(texts, y[:256])
    gate = HelperGate("text", text, budget=3, solved_budget=3)
    results[f"text ({args.text_model})"] = timed(lambda i: gate.should_intervene(obs(i)), max(n // 10, 50))

    if args.prm != "none":
        from prm.verifiers.model import ProcessRewardModel
        from prm.scoring.scorer import PrmScorer

        prm = ProcessRewardModel.create(args.prm, tag_after="state", device="cpu")
        gate = HelperGate("features", classifiers["gbm"], fallback, scorer=PrmScorer(prm), budget=3, solved_budget=3)
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
        print()
        print_large(large, args.large_senders, args.large_mb, args.large_client)
    if trust is not None:
        print()
        print_trust(trust)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_against_in_process(frame, y, observations, n: int) -> dict[str, np.ndarray]:
    """p50/p99 of one decision: ``HelperGate.load(dir)`` here, and ``serve-gate dir`` over HTTP."""
    import tempfile

    import httpx

    names = [name for name in default_feature_names(frame) if name != "prm_score"]
    classifier = FeatureClassifier("gbm", names).fit(frame_features(frame, names), y)
    with tempfile.TemporaryDirectory() as tmp:
        # Without a PRM every decision takes the fallback classifier: here the same gbm.
        HelperGate("features", classifier, classifier, solved_budget=3, trained_on={"horizon": 8}).save(tmp)
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
        with serve_gate(tmp) as url, httpx.Client(base_url=url, timeout=30) as http:
            for i in range(50):  # warm the connection and the server's code paths
                http.post("/v1/gate", json=request(n + i)).raise_for_status()
            over_http = timed(lambda i: http.post("/v1/gate", json=request(i)).raise_for_status(), n)
    return {"in-process HelperGate.should_intervene": in_process, "HTTP POST /v1/gate (serve-gate)": over_http}


@contextlib.contextmanager
def serve_gate(helper: str):
    """``helpgate serve-gate --helper HELPER`` in its own process on 127.0.0.1; yields its URL."""
    import os
    import subprocess

    import httpx

    root = Path(__file__).resolve().parents[2]
    port = free_port()
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    server = subprocess.Popen([sys.executable, "-m", "helper.commands.cli", "serve-gate", "--helper", helper, "--budget", "3",
                               "--port", str(port)], cwd=root, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(1200):  # up to 120 s for the server to load
            try:
                httpx.get(f"http://127.0.0.1:{port}/health").raise_for_status()
                break
            except httpx.HTTPError:
                if server.poll() is not None:
                    raise RuntimeError(f"serve-gate exited with {server.returncode}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def http_under_large_bodies(frame, y, observations, n: int, prm: str, senders: int, megabytes: float,
                            client: str = "socket"):
    """Small requests to a served helper with a real PRM: distinct states, the cache hit path, and
    the cache hit path while ``senders`` clients post large bodies (whose 413 times are kept)."""
    import multiprocessing
    import tempfile

    import httpx

    from prm.verifiers.model import ProcessRewardModel

    names = default_feature_names(frame)
    classifier = FeatureClassifier("gbm", names).fit(frame_features(frame, names), y)
    plain = [name for name in names if name != "prm_score"]
    fallback = FeatureClassifier("gbm", plain).fit(frame_features(frame, plain), y)

    def request(i, o=None):
        o = o or observations[i % len(observations)]
        return {"episode_id": f"bench-{i}", "step": o.step, "state_text": o.state_text, "features": o.features}

    big = json.dumps(request(-1) | {"state_text": "word " * int(megabytes * 1e6 / 5)}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        ProcessRewardModel.create("tiny" if prm == "none" else prm, tag_after="state", device="cpu").save(f"{tmp}/prm")
        HelperGate("features", classifier, fallback, solved_budget=3, trained_on={"horizon": 8}).save(
            f"{tmp}/helper", prm=f"{tmp}/prm")
        with serve_gate(f"{tmp}/helper") as url, httpx.Client(base_url=url, timeout=120) as http:
            # Distinct states: each observation's first request runs the PRM (nothing cached yet).
            distinct = timed(lambda i: http.post("/v1/gate", json=request(10 * n + i)).raise_for_status(),
                             len(observations))
            alone = timed(lambda i: http.post("/v1/gate", json=request(i)).raise_for_status(), n)
            # Senders in their own processes: in this one they would hold the timing client's GIL.
            context = multiprocessing.get_context("fork")
            stop, answers = context.Event(), context.Queue()
            target = send_large if client == "socket" else send_large_httpx
            workers = [context.Process(target=target, args=(url, big, stop, answers)) for _ in range(senders)]
            for worker in workers:
                worker.start()
            try:
                time.sleep(1.0)  # every sender under way before the timing starts
                busy = timed(lambda i: http.post("/v1/gate", json=request(n + i)).raise_for_status(), n)
            finally:
                stop.set()
                results = [answers.get(timeout=300) for _ in workers]
                for worker in workers:
                    worker.join()
    answered = [answer for result in results for answer in result]
    statuses = {status for status, _, _ in answered}
    if statuses != {413}:
        raise RuntimeError(f"large bodies were answered {sorted(statuses)}, expected 413 only")
    return {"distinct states (PRM forward pass)": distinct, "cache hit path, alone": alone,
            "cache hit path, with large bodies": busy,
            "large body: 413 sent (first byte)": np.asarray([ms for _, ms, _ in answered]),
            "large body: written whole, 413 read": np.asarray([ms for _, _, ms in answered])}


def send_large(url: str, body: bytes, stop, answers) -> None:
    """Post ``body`` back to back on one connection until ``stop``; put (status, ms to the reply's
    first byte, ms until the body is written and the reply read) of every answer on ``answers``.

    A raw socket writes the body from a thread while the reply is read, so the first time is the
    server's (when it answered); the second is what a client that writes its whole body before
    reading (httpx, requests) waits."""
    import re
    import socket
    import threading

    host, port = url.removeprefix("http://").split(":")
    request = (f"POST /v1/gate HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(body)}\r\n\r\n").encode() + body
    out = []
    with socket.create_connection((host, int(port))) as sock:
        while not stop.is_set():
            start = time.perf_counter()
            writer = threading.Thread(target=sock.sendall, args=(request,))
            writer.start()
            data = sock.recv(65536)
            first = time.perf_counter()
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, rest = data.split(b"\r\n\r\n", 1)
            length = int(re.search(rb"content-length: *(\d+)", head, re.IGNORECASE).group(1))
            while len(rest) < length:
                rest += sock.recv(65536)
            writer.join()
            out.append((int(head.split()[1]), (first - start) * 1000.0, (time.perf_counter() - start) * 1000.0))
    answers.put(out)


def send_large_httpx(url: str, body: bytes, stop, answers) -> None:
    """``send_large`` through ``httpx``, which reads the reply only once it has written the body
    (both times are then the same: the client's whole wait)."""
    import httpx

    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            start = time.perf_counter()
            answer = client.post("/v1/gate", content=body, headers={"content-type": "application/json"})
            took = (time.perf_counter() - start) * 1000.0
            out.append((answer.status_code, took, took))
    answers.put(out)


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


def print_large(results: dict[str, np.ndarray], senders: int, megabytes: float, client: str) -> None:
    print(f"serve-gate with a tiny PRM, body limit 1 MiB; {senders} {client} clients post {megabytes:g} MB bodies "
          "back to back during the third line")
    print(f"{'request':40s} {'count':>6s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s}")
    for name, times in results.items():
        p50, p99 = np.percentile(times, [50, 99])
        print(f"{name:40s} {len(times):6d} {p50:8.3f} {p99:8.3f} {times.max():8.3f}")
    alone, busy = results["cache hit path, alone"], results["cache hit path, with large bodies"]
    print(f"{'with large bodies / alone':40s} {'':6s} {np.percentile(busy, 50) / np.percentile(alone, 50):7.2f}x "
          f"{np.percentile(busy, 99) / np.percentile(alone, 99):7.2f}x")


TRUST_BUDGET, TRUST_HORIZON, TRUST_EPISODES = 2, 6, 24


def always_helper(folder: str) -> None:
    """A helper folder (no PRM, threshold 0: it wants every decision) on one observation feature ``x``."""
    import polars as pl

    from helper.gates.features import FeatureClassifier

    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"step": np.arange(200) % TRUST_HORIZON, "horizon": [TRUST_HORIZON] * 200,
                          "budget_left": rng.integers(1, 3, 200), "features": ['{"x": 1.0}'] * 200})
    names = ["step", "budget_left", "f_x"]
    fallback = FeatureClassifier("logreg", names).fit(frame_features(frame, names), rng.integers(0, 2, 200))
    HelperGate("features", fallback, fallback, solved_budget=TRUST_BUDGET, threshold=0.0,
               trained_on={"horizon": TRUST_HORIZON}).save(folder)


def start_server(args: list[str], port: int):
    """``helpgate serve-gate ARGS --port PORT`` in its own process; returns it once /health answers (None: it exited,
    with its exit code and the last line it wrote)."""
    import os
    import subprocess
    import tempfile

    import httpx

    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    log = tempfile.TemporaryFile(mode="w+")
    server = subprocess.Popen([sys.executable, "-m", "helper.commands.cli", "serve-gate", *args, "--port", str(port)],
                              cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    for _ in range(1200):
        if server.poll() is not None:
            log.seek(0)
            lines = [line for line in log.read().splitlines() if line.strip()]
            return None, server.returncode, lines[-1] if lines else ""
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return server, None, ""
        time.sleep(0.1)
    server.kill()
    raise RuntimeError("serve-gate did not answer /health within 120 s")


def run_to_exit(args: list[str]) -> tuple[int, list[str]]:
    """``helpgate serve-gate ARGS`` run to its end (one that is refused): its exit code and the lines it wrote."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "helper.commands.cli", "serve-gate", *args], cwd=root,
                          env=os.environ | {"PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300,
                          check=False)
    return done.returncode, [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def crash_traffic(helper: str, rounds: int, fresh_ledger: bool, tmp: str) -> dict:
    """Interventions granted per episode over ``rounds`` SIGKILLs mid-traffic and a last full life: on one ledger,
    or (the baseline) on a fresh ledger at every restart, as a server that kept budgets in memory."""
    import signal
    import threading
    from collections import defaultdict
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    granted, answered, port = defaultdict(set), set(), free_port()
    total = TRUST_EPISODES * TRUST_HORIZON

    def client(c: int) -> None:
        order = [(e, s) for s in range(TRUST_HORIZON) for e in range(TRUST_EPISODES)]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for e, s in order[c * 7:] + order[:c * 7]:
                if (e, s) in answered:
                    continue  # an agent goes on with its episode: a step answered is not asked again
                try:
                    answer = http.post("/v1/gate", json={"episode_id": f"ep-{e}", "step": s, "state_text": f"s{s}",
                                                         "features": {"x": 1.0}}).json()
                except httpx.HTTPError:
                    return
                if answer["intervene"]:
                    granted[e].add(s)
                answered.add((e, s))

    for life in range(rounds + 1):
        ledger = f"{tmp}/ledger-{life if fresh_ledger else 0}.sqlite"
        server, _, _ = start_server(["--helper", helper, "--budget", str(TRUST_BUDGET), "--ledger", ledger], port)
        killer = None
        if life < rounds:
            def kill(before=len(answered), server=server):
                while len(answered) < before + total // (rounds + 2) and server.poll() is None:
                    time.sleep(0.002)
                server.send_signal(signal.SIGKILL)

            killer = threading.Thread(target=kill)
            killer.start()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client, range(8)))
        if killer is not None:
            killer.join()
        server.kill()
        server.wait(timeout=10)
    counts = [len(granted[e]) for e in range(TRUST_EPISODES)]
    return {"granted": sum(counts), "over": sum(c > TRUST_BUDGET for c in counts), "most": max(counts),
            "answered": len(answered)}


def serving_trust(rounds: int) -> dict:
    """The fourth table's rows: crashes with and without the ledger, then bad requests and starts."""
    import tempfile

    import httpx

    out: dict = {"rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        helper = f"{tmp}/helper"
        always_helper(helper)
        out["ledger"] = crash_traffic(helper, rounds, fresh_ledger=False, tmp=tmp)
        out["baseline"] = crash_traffic(helper, rounds, fresh_ledger=True, tmp=tmp)
        cases = []
        port = free_port()
        server, _, _ = start_server(["--helper", helper, "--budget", "2", "--ledger", f"{tmp}/cases.sqlite",
                                     "--idle-episode-s", "1"], port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                def gate(**changes):
                    body = {"episode_id": "e", "step": 0, "state_text": "s", "features": {"x": 1.0}} | changes
                    return http.post("/v1/gate", json=body)

                gate(horizon=3).raise_for_status()
                for what, answer, field in (
                    ("episode id with '/'", gate(episode_id="a/b"), "episode_id"),
                    ("episode id of 300 KB", gate(episode_id="x" * 300_000), "episode_id"),
                    ("step 10^18 at /v1/gate", gate(step=10**18), "step"),
                    ("step 10^18 at /actions", http.post("/v1/episodes/e/actions", json={"step": 10**18,
                                                                                       "action_text": "x"}), "step"),
                    ("step past the horizon at /actions", http.post("/v1/episodes/e/actions", json={
                        "step": 3, "action_text": "x"}), "horizon 3"),
                ):
                    cases.append((what, "422 naming it", f"{answer.status_code}",
                                  answer.status_code == 422 and field in answer.text))
                time.sleep(2.5)
                gate(episode_id="later").raise_for_status()  # a request reaps what has been idle past the limit
                ended = http.post("/v1/episodes/e/end")
                cases.append(("episode idle past --idle-episode-s 1", "ended (404 at /end)", f"{ended.status_code}",
                              ended.status_code == 404))
            code, lines = run_to_exit(["--helper", helper, "--ledger", f"{tmp}/busy.sqlite", "--port", str(port)])
            cases.append(("a port in use", "exit 2, one line naming it", f"exit {code}: {lines[-1] if lines else ''}",
                          code == 2 and len(lines) == 1 and f"port={port}" in lines[0]))
        finally:
            server.kill()
            server.wait(timeout=10)
        Path(helper, "guarantee.json").write_text('{"kind": "helpgate.guarantee", "eps": 0.1, "del')
        port = free_port()
        started, code, line = start_server(["--helper", helper, "--ledger", f"{tmp}/cut.sqlite"], port)
        shown = None if started is None else httpx.get(f"http://127.0.0.1:{port}/health").json()["guarantee"]
        cases.append(("guarantee.json cut short", "starts, no guarantee", "started" if started else f"exit {code}",
                      started is not None and shown is None))
        if started is not None:
            started.kill()
            started.wait(timeout=10)
    out["cases"] = cases
    return out


def print_trust(trust: dict) -> None:
    print(f"serve-gate killed with SIGKILL mid-traffic {trust['rounds']} times, restarted each time; budget "
          f"{TRUST_BUDGET} per episode, {TRUST_EPISODES} episodes of {TRUST_HORIZON} steps, 8 clients, a gate that "
          "wants every decision")
    print(f"{'restarted on':40s} {'granted':>8s} {'most per episode':>17s} {'episodes over budget':>21s}")
    for name, key in (("the same ledger", "ledger"), ("a fresh ledger (no ledger: baseline)", "baseline")):
        row = trust[key]
        print(f"{name:40s} {row['granted']:8d} {row['most']:17d} {row['over']:21d}")
    print()
    print("| case | expected | answered | ok |")
    print("|---|---|---|---|")
    for what, expected, got, ok in trust["cases"]:
        print(f"| {what} | {expected} | {got[:120]} | {'ok' if ok else 'NOT OK'} |")


if __name__ == "__main__":
    main()
