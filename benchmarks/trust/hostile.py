"""Round four of the bad inputs (issue 61's five families, as a hostile user tries them): files, kills, serving, CLI
and plug-ins. Each group is one more entry of ``bad_inputs.CASE_GROUPS``; the cases are ``bad_inputs.Case``.

- files: Parquet shards corrupted or edited byte-wise (their manifests not updated) and shards whose values are wrong
  (their manifests rehashed, as a writer would have), manifests whose fields have the wrong type.
- kills: a tiny pipeline SIGKILLed right after each stage finished, and a collection SIGKILLed part way, each rerun
  with the same command: the rerun finishes and its settings, outputs and rows agree.
- serving: malformed HTTP bodies, ids and steps sent to a real ``serve-gate`` on 127.0.0.1, concurrent requests and
  retries, restarts after SIGKILL (with another ``--budget`` too), two servers on one ledger.
- CLI: negative, NaN and fractional numbers, unknown names, missing files, ``--out`` aliasing an input or another
  command's folder through a link or ``..``, ``--help`` into a closed pipe.
- plug-ins: an env or agent returning NaN or text as success, a negative step, bytes as state, a non-str id, a NaN
  horizon, the wrong kind of object, a ``sys.exit`` or ``KeyboardInterrupt`` inside ``act``; and the "Why" list's
  solve on an arith-chain collection (its expected success must be a probability).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

import bad_inputs as base
from bad_inputs import OFFLINE, PIPELINE_TINY, REPO, Case, _set_row0, entry, variant


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``helpgate serve-gate ARGS`` in a subprocess on a free port, started on first use, SIGKILLed by ``kill`` (and
    at the end of the run: ``SERVERS``); its log is read back for each case (a traceback there is the case's)."""

    def __init__(self, args: list[str]):
        self.args, self.process, self.log, self.read = args, None, None, 0

    def url(self) -> str:
        if self.process is None or self.process.poll() is not None:
            self.start()
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        import httpx

        self.port, self.read = free_port(), 0
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([sys.executable, "-m", "helper.commands.cli", *self.args, "--port",
                                         str(self.port)], cwd=REPO, env={**os.environ, **OFFLINE}, stdout=self.log,
                                        stderr=subprocess.STDOUT, text=True)
        SERVERS.append(self)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"serve-gate {self.args} did not start: {self.new_log()}")

    def new_log(self) -> str:
        """What the server logged since the last call."""
        if self.log is None:
            return ""
        self.log.seek(self.read)
        text = self.log.read()
        self.read = self.log.tell()
        return text

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)


SERVERS: list[Server] = []
"""Every server started; ``stop_servers`` SIGKILLs those still running."""


def stop_servers() -> None:
    for server in SERVERS:
        server.kill()


def flat(text: str) -> str:
    return " ".join(text.split())[:400]


# ---------------------------------------------------------------------------------------------------------- files
def files_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Shards corrupted or edited after they were written (the manifests keep the old hashes), shards with wrong values
    (rehashed), and manifests whose fields have the wrong type."""
    bad, scored, traj = root / "bad", good["scored"], good["trajectories"]

    def copy(name: str, source: Path = scored) -> Path:
        return Path(shutil.copytree(source, bad / f"r4f-{name}"))

    def solve(what, folder, names):
        out = bad / f"{folder.name}-solve"
        return Case(what, ["solve", "--data", str(folder), "--budgets", "1", "2", "--bins", "3", "--out", str(out)],
                    names, out / "solve.json")

    shard = "shard-00001.parquet"
    flipped = copy("flipped")
    data = bytearray((flipped / shard).read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    (flipped / shard).write_bytes(bytes(data))
    halved = copy("halved")
    (halved / shard).write_bytes((halved / shard).read_bytes()[: (halved / shard).stat().st_size // 2])
    csv = copy("csv")
    pl.read_parquet(csv / shard).select("episode_id", "step").write_csv(csv / shard)
    empty = copy("empty-file")
    (empty / shard).write_bytes(b"")
    folder_shard = copy("dir-shard")
    (folder_shard / shard).unlink()
    (folder_shard / shard).mkdir()
    rewritten = copy("rewritten")  # the same rows written again by another writer: other bytes, same values
    pl.read_parquet(rewritten / shard).write_parquet(rewritten / shard, compression="gzip")
    linked = copy("linked")  # a shard replaced by a link to the same shard before it was scored
    (linked / "shard-00000.parquet").unlink()
    (linked / "shard-00000.parquet").symlink_to(traj / "shard-00000.parquet")

    def values(name, change):
        return variant(scored, bad / f"r4f-v-{name}", change)

    def first_episode(column, value):
        def change(frame):
            first = frame["episode_id"][0]
            return frame.with_columns(pl.when(pl.col("episode_id") == first).then(pl.lit(value))
                                      .otherwise(pl.col(column)).alias(column))
        return change

    cases = [
        solve("16 bytes flipped in the middle of a shard (manifest not updated)", flipped, shard),
        solve("a shard cut to half its bytes", halved, shard),
        solve("a shard overwritten with CSV text", csv, shard),
        solve("a shard emptied to 0 bytes", empty, shard),
        solve("a shard replaced by a folder of its name", folder_shard, shard),
        solve("a shard rewritten with other compression (same rows, other bytes)", rewritten, shard),
        solve("a scored shard replaced by a link to its unscored original", linked, "shard-00000.parquet"),
        solve("`episode_id` null on one row (rehashed)", values("id-null", _set_row0("episode_id", None)), "'episode_id'"),
        solve("`success` stored as text (rehashed)", values("success-text", lambda f: f.with_columns(pl.col("success").cast(pl.Utf8))), "'success'"),
        solve("`intervened` stored as integers (rehashed)", values("intervened-int", lambda f: f.with_columns(pl.col("intervened").cast(pl.Int64))), "'intervened'"),
        solve("`prm_score` stored as text (rehashed)", values("score-text", lambda f: f.with_columns(pl.col("prm_score").cast(pl.Utf8))), "'prm_score'"),
        solve("`success` NaN on one episode (rehashed)", values("success-nan", first_episode("success", float("nan"))), "'success'"),
        solve("`success` differs between rows of one episode (rehashed)", values("success-mixed", _set_row0("success", 0.5)), "success"),
        solve("a decision point logged twice (rehashed)", values("dup-row", lambda f: pl.concat([f, f.head(1)])), "shard-0000"),
        solve("`budget_left` 9 on one row of a budget-2 collection (rehashed)", values("budget-9", _set_row0("budget_left", 9)), "budget_left"),
        solve("`success` column renamed `Success` (rehashed)", values("renamed", lambda f: f.rename({"success": "Success"})), "success"),
    ]

    def manifest(name, edit, file="manifest.json", source=scored):
        folder = copy(f"m-{name}", source)
        path = folder / file
        value = json.loads(path.read_text())
        value = edit(value)
        path.write_text(json.dumps(value))
        return folder

    def set_key(key, value):
        def edit(m):
            m[key] = value
            return m
        return edit

    def set_entry(field, value):
        def edit(m):
            m["shards"][shard][field] = value
            return m
        return edit

    def config(key, value):
        def edit(m):
            m["config"][key] = value
            return m
        return edit

    cases += [
        solve("manifest.json is {} (an empty object)", manifest("empty-object", lambda m: {}), "manifest.json"),
        solve("manifest.json is null", manifest("null", lambda m: None), "manifest.json"),
        solve("manifest.json `shards` a list", manifest("shards-list", lambda m: m | {"shards": list(m["shards"])}), "shards"),
        solve("manifest.json `shards` a string", manifest("shards-text", set_key("shards", "shard-00000.parquet")), "shards"),
        solve("manifest.json `complete` 1", manifest("complete-1", set_key("complete", 1)), "complete"),
        solve("manifest.json `complete` missing", manifest("complete-gone", lambda m: {k: v for k, v in m.items() if k != "complete"}), "complete"),
        solve("manifest.json `config` a list", manifest("config-list", set_key("config", [])), "config"),
        solve("manifest.json `config.budget` \"2\" (text)", manifest("budget-text", config("budget", "2")), "config.budget='2'"),
        solve("manifest.json `config.budget` -1", manifest("budget-neg", config("budget", -1)), "config.budget=-1"),
        solve("manifest.json a shard's `rows` -1", manifest("rows-neg", set_entry("rows", -1)), shard),
        solve("manifest.json a shard's `rows` 47.5", manifest("rows-frac", set_entry("rows", 47.5)), shard),
        solve("manifest.json a shard's `sha256` 5 (a number)", manifest("sha-number", set_entry("sha256", 5)), shard),
        solve("prm_score.manifest.json a shard's `sha256` of other bytes", manifest("score-sha-other", set_entry("sha256", "0" * 64), "prm_score.manifest.json"), shard),
        solve("manifest.json a shard's entry null", manifest("entry-null", lambda m: m | {"shards": m["shards"] | {shard: None}}), shard),
        solve("prm_score.manifest.json a JSON list", manifest("score-list", lambda m: [], "prm_score.manifest.json"), "prm_score.manifest.json"),
        solve("prm_score.manifest.json a shard's `prm` 7 (a number)", manifest("score-prm-number", set_entry("prm", 7), "prm_score.manifest.json"), shard),
        solve("prm_score.manifest.json `shards` null", manifest("score-shards-null", set_key("shards", None), "prm_score.manifest.json"), "shards"),
        Case("manifest.json `complete` 1: prm train", ["prm", "train", "--data", str(manifest("t-complete-1", set_key("complete", 1), source=traj)), "--model", "tiny", "--out", str(bad / "r4f-t1")], "complete", bad / "r4f-t1" / "prm_config.json"),
        Case("manifest.json a shard's `sha256` of other bytes: prm export", ["prm", "export", "--data", str(manifest("e-sha-other", set_entry("sha256", "0" * 64), source=traj)), "--out", str(bad / "r4f-e1.jsonl")], shard, bad / "r4f-e1.jsonl"),
        Case("`state_text` null on one row (rehashed): prm score", ["prm", "score", "--data", str(variant(traj, bad / "r4f-v-state-null", _set_row0("state_text", None))), "--model", str(good["prm"]), "--out", str(bad / "r4f-s2")], "'state_text'", bad / "r4f-s2" / "prm_score.manifest.json"),
        Case("16 bytes flipped in a shard: prm score", ["prm", "score", "--data", str(flipped), "--model", str(good["prm"]), "--out", str(bad / "r4f-s1")], shard, bad / "r4f-s1" / "prm_score.manifest.json"),
    ]
    return cases


# ---------------------------------------------------------------------------------------------------------- kills
def _pipeline_killed_after(out: Path, stage: str) -> None:
    """A tiny pipeline run in a subprocess, SIGKILLed as soon as ``stage`` has finished (its ``.done``)."""
    argv = ["pipeline", *PIPELINE_TINY, "--out", str(out)]
    process = subprocess.Popen([sys.executable, *entry(argv), *argv], cwd=REPO, env={**os.environ, **OFFLINE},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = out / stage / ".done"
    while process.poll() is None and not marker.exists():
        time.sleep(0.01)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)


def _run_agrees(out: Path) -> str | None:
    """None when a pipeline run's stages are all done and agree with pipeline.json; else what is wrong."""
    said = json.loads((out / "pipeline.json").read_text())
    for stage in ("collect", "prm", "score", "solve", "distill", "sweep"):
        if not (out / stage / ".done").is_file():
            return f"stage {stage} has no .done"
    solved = json.loads((out / "solve" / "solution.json").read_text())["config"]
    if solved["bins"] != said["bins"]:
        return f"solve used --bins {solved['bins']}, pipeline.json says {said['bins']}"
    frame = pl.read_parquet(sorted((out / "trajectories").glob("*.parquet")))
    if frame.select("episode_id", "step").is_duplicated().any():
        return "a decision point is written twice"
    if frame["episode_id"].n_unique() != said["episodes"]:
        return f"{frame['episode_id'].n_unique()} episodes collected, pipeline.json says {said['episodes']}"
    return None


def kills_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Kills at stage boundaries (a pipeline SIGKILLed right after each stage's .done), a collection SIGKILLed part
    way, and a rerun after a kill with other settings: the rerun finishes and agrees, or is refused naming them."""
    bad, catalog = root / "bad", str(good["catalog"])
    cases = []
    for stage in ("collect", "prm", "score", "solve", "distill"):
        out = bad / f"r4k-after-{stage}"
        _pipeline_killed_after(out, stage)
        cases.append(Case(f"pipeline SIGKILLed right after its {stage} stage, rerun (resumes; settings and outputs "
                          "agree)", ["pipeline", *PIPELINE_TINY, "--out", str(out)], "", expect=0,
                          after=lambda out=out: _run_agrees(out)))
    before = bad / "r4k-bins-before-solve"
    _pipeline_killed_after(before, "score")
    cases.append(Case("pipeline SIGKILLed after its score stage, rerun with --bins 3 (no stage used bins yet: goes "
                      "on; settings and outputs agree)", ["pipeline", *PIPELINE_TINY, "--out", str(before), "--bins",
                                                           "3"], "", expect=0, after=lambda: _run_agrees(before)))
    after = bad / "r4k-bins-after-solve"
    _pipeline_killed_after(after, "solve")
    cases.append(Case("pipeline SIGKILLed after its solve stage, rerun with --bins 3 (not --redo)",
                      ["pipeline", *PIPELINE_TINY, "--out", str(after), "--bins", "3"], "bins"))
    collect = ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "24", "--shard-size", "4",
               "--explore-p", "0", "0.3", "0.6", "--seed", "3"]
    killed = bad / "r4k-collect"
    process = subprocess.Popen([sys.executable, "-m", "helper.commands.cli", *collect, "--out", str(killed)],
                               cwd=REPO, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    while process.poll() is None and len(list(killed.glob("shard-*.parquet"))) < 2:
        time.sleep(0.01)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    whole = bad / "r4k-collect-whole"
    subprocess.run([sys.executable, "-m", "helper.commands.cli", *collect, "--out", str(whole)], cwd=REPO,
                   env={**os.environ, **OFFLINE}, capture_output=True, check=True)

    def same_rows() -> str | None:
        ours, theirs = (pl.read_parquet(sorted(f.glob("shard-*.parquet"))).sort("episode_id", "step")
                        for f in (killed, whole))
        return None if ours.equals(theirs) else "the resumed collection's rows differ from an unkilled one's"

    partial = Path(shutil.copytree(killed, bad / "r4k-collect-partial"))
    cases += [
        Case("solve on a collection SIGKILLed part way", ["solve", "--data", str(partial), "--out", str(bad / "r4k-v1")], "complete", bad / "r4k-v1" / "solve.json"),
        Case("prm train on a collection SIGKILLed part way", ["prm", "train", "--data", str(partial), "--model", "tiny", "--out", str(bad / "r4k-t1")], "complete", bad / "r4k-t1" / "prm_config.json"),
        Case("collect SIGKILLed part way, rerun (resumes to the rows of an unkilled run)", [*collect, "--out", str(killed)], "", expect=0, after=same_rows),
    ]
    return cases


# -------------------------------------------------------------------------------------------------------- serving
FEATURES = {"memory_advice_hits": 0.0, "memory_entries": 1.0, "memory_similar_count": 0.0,
            "memory_top_similarity": 0.5, "retrieved_tokens": 10.0}
"""The features the good helper reads (its /health lists them)."""


def _body(**changes) -> dict:
    body = {"episode_id": "e1", "step": 0, "state_text": "Is the lamp dimmable?", "features": FEATURES} | changes
    return {k: v for k, v in body.items() if v is not ...}


def _http(server: Server, method: str, path: str, body=None, raw: bytes | None = None,
          content_type: str = "application/json"):
    def call() -> tuple[int, str, str]:
        import httpx

        url = server.url()
        answer = httpx.request(method, url + path, json=body if raw is None else None, content=raw,
                               headers={"content-type": content_type}, timeout=60)
        return answer.status_code, f"HTTP {answer.status_code}: {flat(answer.text)}", server.new_log()
    return call


def _post(url: str, body: dict) -> dict:
    import httpx

    answer = httpx.post(url + "/v1/gate", json=body, timeout=60)
    answer.raise_for_status()
    return answer.json()


def serving_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Malformed requests to a real serve-gate (a copy of the good helper whose threshold 0 wants every decision, so
    every grant is the ledger's), concurrency, retries, restarts after SIGKILL, two servers on one ledger."""
    bad = root / "bad"
    helper = Path(shutil.copytree(good["helper"], bad / "r4s-helper",
                                  ignore=shutil.ignore_patterns("serve-ledger.sqlite*")))
    config = json.loads((helper / "helper.json").read_text())
    (helper / "helper.json").write_text(json.dumps(config | {"threshold": 0.0}))
    serve = ["serve-gate", "--helper", str(helper), "--budget", "2"]
    main = Server([*serve, "--ledger", str(bad / "r4s-main.sqlite")])

    def request(what, body, expect, names, path="/v1/gate", method="POST", raw=None, content_type="application/json"):
        shown = f"{method} {path} " + (flat(json.dumps(body))[:120] if raw is None else repr(raw[:80]))
        return Case(what, [], names, expect=expect, call=_http(main, method, path, body, raw, content_type),
                    shown=shown)

    text = json.dumps(_body()).encode()
    cases = [
        request("episode_id with '/'", _body(episode_id="a/b"), 422, "episode_id"),
        request("episode_id of 300 KB", _body(episode_id="x" * 300_000), 422, "episode_id"),
        request("episode_id ''", _body(episode_id=""), 422, "episode_id"),
        request("episode_id '..'", _body(episode_id=".."), 422, "episode_id"),
        request("episode_id 5 (a number)", _body(episode_id=5), 422, "episode_id"),
        request("episode_id null", _body(episode_id=None), 422, "episode_id"),
        request("episode_id with a space", _body(episode_id="a b"), 422, "episode_id"),
        request("episode_id 'a%2Fb' (an escaped slash)", _body(episode_id="a%2Fb"), 422, "episode_id"),
        request("step 10^18", _body(step=10**18), 422, "step"),
        request("step 2^63", _body(step=2**63), 422, "step"),
        request("step 4, past the horizon 4", _body(episode_id="past", step=4), 422, "horizon"),
        request("step -1", _body(step=-1), 422, "step"),
        request("step \"0\" (text)", _body(step="0"), 422, "step"),
        request("step 1.5", _body(step=1.5), 422, "step"),
        request("step true", _body(step=True), 422, "step"),
        request("no step", _body(step=...), 422, "step"),
        request("no state_text", _body(state_text=...), 422, "state_text"),
        request("state_text a list", _body(state_text=["a"]), 422, "state_text"),
        request("features without one the helper reads", _body(features={k: v for k, v in FEATURES.items() if k != "memory_entries"}), 422, "memory_entries"),
        request("features with an annotation key (gold_answer)", _body(features=FEATURES | {"gold_answer": 1.0}), 422, "gold_answer"),
        request("feature \"14\" (text)", _body(features=FEATURES | {"memory_entries": "14"}), 422, "memory_entries"),
        request("feature null", _body(features=FEATURES | {"memory_entries": None}), 422, "memory_entries"),
        request("features a list", _body(features=[1, 2]), 422, "features"),
        request("features {} (none)", _body(features={}), 422, "features"),
        request("feature NaN", None, 422, "memory_entries", raw=json.dumps(_body(features=FEATURES | {"memory_entries": float("nan")})).encode()),
        request("horizon 0", _body(horizon=0), 422, "horizon"),
        request("horizon 5, past the helper's 4", _body(horizon=5), 422, "horizon"),
        request("an unknown field (gold)", _body(gold="yes"), 422, "gold"),
        request("proposal 5 (a number)", _body(proposal=5), 422, "proposal"),
        request("body not JSON", None, 422, "JSON", raw=b"hello"),
        request("body empty", None, 422, "body", raw=b""),
        request("body cut short", None, 422, "JSON", raw=text[:30]),
        request("body a JSON list", None, 422, "body", raw=b"[]"),
        request("body not UTF-8", None, 400, "body", raw=text.replace(b"lamp", b"l\xffmp")),
        request("state_text with a lone surrogate", None, 422, "state_text", raw=text.replace(b"lamp", b"\\ud800")),
        request("a 4 MB body", _body(state_text="x" * 4_000_000), 413, "--max-body-bytes"),
        request("/end of an episode never asked", None, 404, "nobody", path="/v1/episodes/nobody/end"),
        request("/actions of an episode never asked", {"step": 0, "action_text": "a"}, 404, "nobody", path="/v1/episodes/nobody/actions"),
        request("/actions step past the horizon", {"step": 9, "action_text": "a"}, 422, "horizon", path="/v1/episodes/e0/actions"),
        request("/actions action_text 5", {"step": 0, "action_text": 5}, 422, "action_text", path="/v1/episodes/e0/actions"),
        request("GET /v1/gate", None, 405, "Method Not Allowed", method="GET"),
    ]
    cases[-3].call = _after_open(main, cases[-3].call)  # /actions of an open episode
    cases[-2].call = _after_open(main, cases[-2].call)

    # Concurrency and retries on one server.
    seen: dict[str, object] = {}

    def concurrent() -> tuple[int, str, str]:
        url = main.url()
        asks = [(f"c{e}", s) for e in range(8) for s in range(4)] * 4  # each decision point asked 4 times at once
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda a: (a, _post(url, _body(episode_id=a[0], step=a[1]))), asks))
        first: dict[tuple, dict] = {}
        seen["differ"] = sum(first.setdefault(a, answer) != answer for a, answer in answers)
        granted = defaultdict(set)
        for (episode, step), answer in answers:
            if answer["intervene"]:
                granted[episode].add(step)
        seen["granted"] = {e: len(s) for e, s in granted.items()}
        return 200, f"128 requests, 8 episodes x 4 steps each asked 4 times at once: granted {sorted(seen['granted'].values())}", main.new_log()

    def concurrent_ok() -> str | None:
        if seen["differ"]:
            return f"{seen['differ']} retries got another answer"
        over = {e: n for e, n in seen["granted"].items() if n > 2}
        return f"granted past the budget of 2: {over}" if over else None

    cases.append(Case("128 concurrent requests with retries (budget 2 each)", [], "", expect=200, call=concurrent,
                      after=concurrent_ok, shown="POST /v1/gate x 128 in 32 threads"))

    # Restarts on a ledger.
    restart: dict[str, int] = {}

    def restarted(name: str, second_budget: str) -> tuple[int, str, str]:
        ledger = str(bad / f"r4s-{name}.sqlite")
        first = Server([*serve, "--ledger", ledger])
        url = first.url()
        granted = sum(_post(url, _body(episode_id="r1", step=s))["intervene"] for s in (0, 1))
        first.kill()
        second = Server(["serve-gate", "--helper", str(helper), "--budget", second_budget, "--ledger", ledger])
        url = second.url()
        again = _post(url, _body(episode_id="r1", step=0))["intervene"]  # a retry of a granted decision
        granted += sum(_post(url, _body(episode_id="r1", step=s))["intervene"] for s in (2, 3))
        log = first.new_log() + second.new_log()
        second.kill()
        restart[name] = granted
        return 200, f"granted {granted} of 2 over a SIGKILL and a restart (retry answered {again})", log

    cases += [
        Case("serve-gate SIGKILLed and restarted on its ledger", [], "", expect=200,
             call=lambda: restarted("restart", "2"), after=lambda: None if restart["restart"] <= 2 else
             f"granted {restart['restart']} of 2", shown="serve-gate; 2 grants; SIGKILL; serve-gate; 2 more asks"),
        Case("serve-gate restarted on its ledger with --budget 5", [], "", expect=200,
             call=lambda: restarted("budget5", "5"), after=lambda: None if restart["budget5"] <= 2 else
             f"granted {restart['budget5']} of 2", shown="serve-gate --budget 2; SIGKILL; serve-gate --budget 5"),
    ]

    traffic: dict[str, object] = {}

    def mid_traffic() -> tuple[int, str, str]:
        ledger = str(bad / "r4s-traffic.sqlite")
        granted, answered, log = defaultdict(set), set(), ""
        for life in range(3):
            server = Server([*serve, "--ledger", ledger])
            url = server.url()
            if life < 2:
                def kill(server=server, before=len(answered)):
                    while len(answered) < before + 16 and server.process.poll() is None:
                        time.sleep(0.002)
                    server.kill()
                killer = threading.Thread(target=kill)
                killer.start()
            _traffic(url, granted, answered)
            if life < 2:
                killer.join(timeout=120)
            log += server.new_log()
            server.kill()
        traffic["granted"] = {e: len(s) for e, s in granted.items()}
        traffic["answered"] = len(answered)
        return 200, f"3 lives, 2 SIGKILLs mid-traffic: {len(answered)} of 96 decision points answered, granted " \
                    f"{sorted(traffic['granted'].values())}", log

    def mid_traffic_ok() -> str | None:
        over = {e: n for e, n in traffic["granted"].items() if n > 2}
        if over:
            return f"granted past the budget of 2: {over}"
        return None if traffic["answered"] == 96 else f"{traffic['answered']} of 96 answered"

    cases.append(Case("serve-gate SIGKILLed twice mid-traffic (8 clients)", [], "", expect=200, call=mid_traffic,
                      after=mid_traffic_ok, shown="8 clients x 24 episodes x 4 steps; SIGKILL; restart; ..."))

    shared: dict[str, object] = {}

    def two_servers() -> tuple[int, str, str]:
        ledger = str(bad / "r4s-shared.sqlite")
        servers = [Server([*serve, "--ledger", ledger]) for _ in range(2)]
        urls = [s.url() for s in servers]
        asks = [(f"s{e}", s, k) for e in range(6) for s in range(4) for k in range(2)]
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda a: (a, _post(urls[a[2]], _body(episode_id=a[0], step=a[1]))), asks))
        granted = defaultdict(set)
        for (episode, step, _), answer in answers:
            if answer["intervene"]:
                granted[episode].add(step)
        log = "".join(s.new_log() for s in servers)
        for s in servers:
            s.kill()
        shared["granted"] = {e: len(s) for e, s in granted.items()}
        return 200, f"two servers on one ledger, each decision point asked of both: granted " \
                    f"{sorted(shared['granted'].values())}", log

    cases.append(Case("two serve-gates on one ledger, asked the same decisions at once", [], "", expect=200,
                      call=two_servers, after=lambda: None if max(shared["granted"].values()) <= 2 else
                      f"granted past the budget: {shared['granted']}", shown="serve-gate x 2 --ledger L"))

    cut = Path(shutil.copytree(helper, bad / "r4s-cut-guarantee"))
    (cut / "guarantee.json").write_text('{"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "tar')
    guarded = Server(["serve-gate", "--helper", str(cut), "--ledger", str(bad / "r4s-cut.sqlite")])

    def serves_warned() -> tuple[int, str, str]:
        import httpx

        health = httpx.get(guarded.url() + "/health", timeout=30)
        log = guarded.new_log()
        guarded.kill()
        return health.status_code, base.message(log), log

    cases.append(Case("serve-gate, guarantee.json cut short (warned, serves)", [], "guarantee.json", expect=200,
                      call=serves_warned, shown=f"serve-gate --helper …/bad/{cut.name}"))
    cases += [
        Case("serve-gate --budget -1", [*serve[:3], "--budget", "-1"], "budget=-1"),
        Case("serve-gate --budget nan", [*serve[:3], "--budget", "nan"], "--budget"),
        Case("serve-gate --horizon 0", [*serve, "--horizon", "0"], "horizon=0"),
        Case("serve-gate --max-body-bytes 0", [*serve, "--max-body-bytes", "0"], "max_body_bytes=0"),
        Case("serve-gate --helper that does not exist", ["serve-gate", "--helper", str(bad / "r4s-nowhere")], "r4s-nowhere"),
        Case("serve-gate --ledger a folder", [*serve, "--ledger", str(good["solve"])], "solve"),
        Case("serve-gate --port -1", [*serve, "--port", "-1"], "port=-1"),
        Case("serve-gate --host not an address", [*serve, "--host", "not a host", "--ledger", str(bad / "r4s-host.sqlite")], "not a host"),
    ]
    return cases


def _after_open(server: Server, call):
    """``call`` after episode e0 is open (asked once)."""
    def opened():
        _post(server.url(), _body(episode_id="e0", step=0))
        return call()
    return opened


def _traffic(url: str, granted: dict, answered: set, clients: int = 8) -> None:
    """Clients ask every (episode, step) not answered yet, each in its own order; a granted decision point is added
    to ``granted[episode]``; returns when all are answered or the server is gone."""
    import httpx

    def client(c: int) -> None:
        order = [(e, s) for s in range(4) for e in range(24)]
        order = order[c * 7 % len(order):] + order[:c * 7 % len(order)]
        with httpx.Client(base_url=url, timeout=30) as http:
            for e, s in order:
                if (e, s) in answered:
                    continue
                try:
                    answer = http.post("/v1/gate", json=_body(episode_id=f"t{e}", step=s))
                except httpx.HTTPError:
                    return
                if answer.status_code == 200:
                    if answer.json()["intervene"]:
                        granted[f"t{e}"].add(s)
                    answered.add((e, s))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))


# ------------------------------------------------------------------------------------------------------------ CLI
def cli_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Numbers out of range, unknown names, missing files, --out aliasing an input or another command's folder (links
    and '..' included), --help into a closed pipe."""
    bad, catalog = root / "bad", str(good["catalog"])
    helper, solve_dir, prm, scored, traj = (str(good[k]) for k in ("helper", "solve", "prm", "scored", "trajectories"))
    plugin = ["--env", "examples.arith_chain:make_episodes", "--agent", "examples.arith_chain:make_agent"]
    collect = ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "4"]
    nowhere = str(bad / "r4c-nowhere")

    def out(name: str) -> str:
        return str(bad / f"r4c-{name}")

    cases = [
        Case("collect --budget nan", [*collect, "--budget", "nan", "--out", out("c1")], "--budget", bad / "r4c-c1"),
        Case("collect --episodes 2.5", ["collect", "--data", catalog, "--episodes", "2.5", "--out", out("c2")], "--episodes", bad / "r4c-c2"),
        Case("collect --batch-size 0", [*collect, "--batch-size", "0", "--out", out("c3")], "batch_size=0", bad / "r4c-c3"),
        Case("collect --plugin-timeout-s 0", ["collect", *plugin, "--episodes", "4", "--plugin-timeout-s", "0", "--out", out("c4")], "plugin_timeout_s=", bad / "r4c-c4"),
        Case("collect --plugin-timeout-s nan", ["collect", *plugin, "--episodes", "4", "--plugin-timeout-s", "nan", "--out", out("c5")], "--plugin-timeout-s", bad / "r4c-c5"),
        Case("collect --plugin-max-steps 0", ["collect", *plugin, "--episodes", "4", "--plugin-max-steps", "0", "--out", out("c6")], "plugin_max_steps=0", bad / "r4c-c6"),
        Case("collect --env a module without :factory", ["collect", "--env", "examples.arith_chain", "--agent", "examples.arith_chain:make_agent", "--episodes", "4", "--out", out("c7")], "examples.arith_chain", bad / "r4c-c7"),
        Case("collect --env a module that does not exist", ["collect", "--env", "no_such_module:make", "--agent", "examples.arith_chain:make_agent", "--episodes", "4", "--out", out("c8")], "no_such_module", bad / "r4c-c8"),
        Case("collect --env a factory the module lacks", ["collect", "--env", "examples.arith_chain:nope", "--agent", "examples.arith_chain:make_agent", "--episodes", "4", "--out", out("c9")], "nope", bad / "r4c-c9"),
        Case("collect --data a file, not a folder", ["collect", "--data", str(good["scored"] / "manifest.json"), "--episodes", "4", "--out", out("c10")], "manifest.json", bad / "r4c-c10"),
        Case("sweep --env minecraft", ["sweep", "--helper", helper, "--env", "minecraft", "--episodes", "2", "--budgets", "0", "--methods", "never", "--out", out("s1")], "env='minecraft'", bad / "r4c-s1" / "summary.json"),
        Case("evaluate --env minecraft", ["evaluate", "--helper", helper, "--env", "minecraft", "--episodes", "2", "--out", out("e1")], "env='minecraft'", bad / "r4c-e1"),
        Case("pipeline --env minecraft", ["pipeline", "--env", "minecraft", "--out", out("p1")], "env='minecraft'", bad / "r4c-p1" / "pipeline.json"),
        Case("calibrate --env minecraft", ["calibrate", "--helper", helper, "--env", "minecraft", "--episodes", "4"], "env='minecraft'"),
        Case("sweep --budgets -1", ["sweep", "--helper", helper, "--episodes", "2", "--budgets", "-1", "--methods", "never", "--out", out("s2")], "budgets=[-1]", bad / "r4c-s2" / "summary.json"),
        Case("sweep --budgets nan", ["sweep", "--helper", helper, "--episodes", "2", "--budgets", "nan", "--out", out("s3")], "--budgets", bad / "r4c-s3" / "summary.json"),
        Case("evaluate --budgets -1", ["evaluate", "--helper", helper, "--episodes", "2", "--budgets", "-1", "--out", out("e2")], "budgets=[-1]", bad / "r4c-e2"),
        Case("evaluate --episodes -1", ["evaluate", "--helper", helper, "--episodes", "-1", "--out", out("e3")], "episodes=-1", bad / "r4c-e3"),
        Case("pipeline --budgets -1", ["pipeline", "--budgets", "-1", "--out", out("p2")], "budgets=[-1]", bad / "r4c-p2" / "pipeline.json"),
        Case("pipeline --budgets nan", ["pipeline", "--budgets", "nan", "--out", out("p3")], "--budgets", bad / "r4c-p3" / "pipeline.json"),
        Case("pipeline --prm-folds 0", ["pipeline", "--prm-folds", "0", "--out", out("p4")], "prm_folds=0", bad / "r4c-p4" / "pipeline.json"),
        Case("solve --bins -3", ["solve", "--data", scored, "--bins", "-3", "--out", out("v1")], "bins=-3", bad / "r4c-v1" / "solve.json"),
        Case("solve --budgets 1.5", ["solve", "--data", scored, "--budgets", "1.5", "--out", out("v2")], "--budgets", bad / "r4c-v2" / "solve.json"),
        Case("solve --data a file, not a folder", ["solve", "--data", str(good["scored"] / "manifest.json"), "--out", out("v3")], "manifest.json", bad / "r4c-v3" / "solve.json"),
        Case("solve --bisn 3 (a misspelt option)", ["solve", "--data", scored, "--bisn", "3"], "--bisn"),
        Case("calibrate --delta 0", ["calibrate", "--helper", helper, "--delta", "0", "--episodes", "4"], "delta="),
        Case("calibrate --helper that does not exist", ["calibrate", "--helper", nowhere, "--episodes", "4"], "r4c-nowhere"),
        Case("report --resamples 0", ["report", "--no-figures", "--resamples", "0", str(good["helper"]), "--out", out("r1.md")], "resamples=0", bad / "r4c-r1.md"),
        Case("report a run that does not exist", ["report", "--no-figures", nowhere, "--out", out("r2.md")], "r4c-nowhere", bad / "r4c-r2.md"),
        Case("distill --labels that does not exist", ["distill", "--labels", nowhere, "--prm", prm, "--out", out("d1")], "r4c-nowhere", bad / "r4c-d1" / "helper.json"),
        Case("distill --prm that does not exist", ["distill", "--labels", solve_dir, "--prm", nowhere, "--out", out("d2")], "r4c-nowhere", bad / "r4c-d2" / "helper.json"),
        Case("evaluate --helper a solve folder", ["evaluate", "--helper", solve_dir, "--episodes", "2", "--out", out("e4")], "helper.json", bad / "r4c-e4"),
        Case("prm score --model a helper folder", ["prm", "score", "--data", traj, "--model", helper, "--out", out("sc1")], "prm_config.json", bad / "r4c-sc1" / "prm_score.manifest.json"),
        Case("prm train --data that does not exist", ["prm", "train", "--data", nowhere, "--model", "tiny", "--out", out("t1")], "r4c-nowhere", bad / "r4c-t1"),
        Case("agile sft --data-file that does not exist", ["agile", "sft", "--model", "tiny", "--data-file", nowhere + ".jsonl", "--out", out("sft"), "--no-save"], "r4c-nowhere.jsonl"),
    ]

    # --out aliasing an input or another command's folder, through links and '..'.
    def folder(name: str, source: Path) -> Path:
        return Path(shutil.copytree(source, bad / f"r4o-{name}", ignore=shutil.ignore_patterns("serve-ledger.sqlite*")))

    def link(name: str, target: Path) -> Path:
        path = bad / f"r4o-{name}-link"
        path.symlink_to(target, target_is_directory=True)
        return path

    o_scored, o_traj = folder("scored", good["scored"]), folder("traj", good["trajectories"])
    o_solve, o_helper, o_prm = folder("solve", good["solve"]), folder("helper", good["helper"]), folder("prm", good["prm"])
    scored_link, solve_link, helper_link = link("scored", o_scored), link("solve", o_solve), link("helper", o_helper)
    dotted = f"{o_scored}/../{o_scored.name}"

    def refused(what, argv, names, guarded: Path):
        """``argv`` must leave ``guarded`` (a folder another command wrote) exactly as it was."""
        before = _listing(guarded)
        return Case(what, argv, names, after=lambda: None if _listing(guarded) == before else
                    f"{guarded.name} changed: {sorted(set(_listing(guarded)) ^ set(before))[:3]}")

    solve = ["solve", "--data", str(o_scored), "--budgets", "1", "--bins", "3", "--out"]
    distill = ["distill", "--labels", str(o_solve), "--prm", str(o_prm), "--out"]
    evaluate = ["evaluate", "--helper", str(o_helper), "--episodes", "2", "--budgets", "0", "--out"]
    sweep = ["sweep", "--helper", str(o_helper), "--methods", "never", "--episodes", "2", "--budgets", "0", "--out"]
    train = ["prm", "train", "--data", str(o_traj), "--model", "tiny", "--out"]
    cases += [
        refused("solve --out DATA/../DATA (its input, spelt with ..)", [*solve, dotted], "own input", o_scored),
        refused("solve --out a link to its --data", [*solve, str(scored_link)], "own input", o_scored),
        refused("solve --out LINK/solve (inside its input through a link)", [*solve, f"{scored_link}/solve"], "own input", o_scored),
        refused("solve --out a helper folder (overwrote its policy.npz)", [*solve, str(o_helper)], "a helper folder", o_helper),
        refused("solve --out a link to a helper folder", [*solve, str(helper_link)], "a helper folder", o_helper),
        refused("solve --out inside a helper folder", [*solve, f"{o_helper}/solve"], "inside", o_helper),
        refused("solve --out a PRM folder", [*solve, str(o_prm)], "a PRM folder", o_prm),
        refused("solve --out another collection", [*solve, str(o_traj)], "a collection folder", o_traj),
        refused("distill --out its --labels (the solve folder)", [*distill, str(o_solve)], "a solve folder", o_solve),
        refused("distill --out a link to its --labels", [*distill, str(solve_link)], "a solve folder", o_solve),
        refused("distill --out its --prm", [*distill, str(o_prm)], "a PRM folder", o_prm),
        refused("distill --out a collection", [*distill, str(o_traj)], "a collection folder", o_traj),
        refused("evaluate --out its --helper", [*evaluate, str(o_helper)], "a helper folder", o_helper),
        refused("evaluate --out a collection", [*evaluate, str(o_scored)], "a collection folder", o_scored),
        refused("sweep --out its --helper", [*sweep, str(o_helper)], "a helper folder", o_helper),
        refused("sweep --out a collection", [*sweep, str(o_scored)], "a collection folder", o_scored),
        refused("prm train --out a solve folder", [*train, str(o_solve)], "a solve folder", o_solve),
        refused("prm train --out a helper folder", [*train, str(o_helper)], "a helper folder", o_helper),
        refused("prm score --out DATA/../DATA (its input, another spelling)", ["prm", "score", "--data", str(o_traj), "--model", prm, "--out", f"{o_traj}/../{o_traj.name}"], "under another name", o_traj),
        refused("prm score --out a PRM folder", ["prm", "score", "--data", str(o_traj), "--model", prm, "--out", str(o_prm)], "r4o-prm", o_prm),
        refused("collect --out a helper folder", [*collect, "--out", str(o_helper)], "r4o-helper", o_helper),
        refused("collect --out a scored collection of other settings", [*collect, "--out", str(o_scored)], "r4o-scored", o_scored),
    ]

    # --help into a pipe closed after one line: no traceback (BrokenPipeError).
    for command in ("collect-offline-trajectories --help", "helpgate --help", "helpgate solve --help"):
        program, *rest = command.split()
        module = "helper.data.collect" if program == "collect-offline-trajectories" else "helper.commands.cli"
        cases.append(Case(f"{command} | head -1", [], "", expect=0, call=_piped(module, rest),
                          shown=f"{command} \\| head -1"))
    return cases


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def _piped(module: str, argv: list[str]):
    def call() -> tuple[int, str, str]:
        shell = f"{sys.executable} -m {module} {' '.join(argv)} | head -1"
        done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, **OFFLINE}, timeout=300)
        # 141: ended by SIGPIPE when head closed the pipe, as any Unix tool is; what matters is no traceback.
        return 0 if done.returncode in (0, 141) and done.stdout.startswith("usage:") else done.returncode, \
            flat(done.stdout), done.stderr
    return call


# -------------------------------------------------------------------------------------------------------- plug-ins
def plugin_return_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """A plug-in's wrong returns (``tests/misbehaving_plugins.py``), one line naming the plug-in; and the "Why"
    list's solve on a scored arith-chain collection, whose expected success must be a probability."""
    from helper.data.collect import CollectConfig
    from helper.data.collect import run as collect_run
    from helper.stored_config import config_of
    from prm.scoring.score import ScoreConfig, run_score
    from prm.training.train import TrainConfig, run_train

    bad = root / "bad"
    (root / "plugins").mkdir(exist_ok=True)
    (root / "plugins" / "misbehaving_plugins.py").write_text(base.MISBEHAVING.read_text())
    (root / "plugins" / "missing_dependency.py").write_text("import no_such_package_xyz\n\n\ndef make(split, count, seed):\n    return []\n")
    env, agent = "examples.arith_chain:make_episodes", "examples.arith_chain:make_agent"

    def collect(what, env_name, agent_name, names, expect=2, after=None):
        out = bad / f"r4p-{env_name.split(':')[1]}-{agent_name.split(':')[1]}"
        return Case(what, ["collect", "--env", env_name, "--agent", agent_name, "--episodes", "4", "--shard-size", "4",
                           "--batch-size", "2", "--explore-p", "0.5", "--out", str(out)], names,
                    out / "shard-00000.parquet" if expect else None, expect=expect, after=after)

    def m(name: str) -> str:
        return f"misbehaving_plugins:{name}"

    huge = bad / "r4p-huge_state-make_agent"

    def kept_whole() -> str | None:
        frame = pl.read_parquet(sorted(huge.glob("*.parquet")))
        longest = frame["state_text"].str.len_chars().max()
        return None if longest > 20_000_000 else f"a state was cut to {longest} characters"

    cases = [
        collect("episode success() returns NaN", m("nan_success"), agent, "success() returned nan"),
        collect("episode success() returns 'yes'", m("text_success"), agent, "success() returned 'yes'"),
        collect("observation step -1 (a negative step)", m("negative_step"), agent, "step=-1"),
        collect("observation state_text as bytes", m("bytes_state"), agent, "state_text"),
        collect("observation feature 'high' (text)", m("text_feature"), agent, m("text_feature")),
        collect("episode ids are integers", m("int_ids"), agent, "episode_id 1000 (int)"),
        collect("episode ids are all ''", m("empty_ids"), agent, "episode_id ''"),
        collect("episode horizon NaN", m("nan_horizon"), agent, "horizon=nan"),
        collect("episode horizon 0", m("zero_horizon"), agent, "horizon=0"),
        collect("env factory returns None", m("returns_none"), agent, "returned NoneType"),
        collect("env factory returns one episode fewer than count", m("returns_fewer"), agent, "count="),
        collect("env factory returns strings", m("returns_strings"), agent, "(str)"),
        collect("env factory returns a generator", m("returns_generator"), agent, "returned generator"),
        collect("env factory takes no arguments", m("takes_no_arguments"), agent, m("takes_no_arguments")),
        collect("env 'factory' is an int", m("not_callable"), agent, "not callable"),
        collect("env module imports a package that is not installed", "missing_dependency:make", agent, "no_such_package_xyz"),
        collect("episode step() returns None", m("none_step"), agent, "step() returned NoneType"),
        collect("episode expert_action() returns None", m("none_expert"), agent, "expert_action() returned NoneType"),
        collect("agent act() returns None", env, m("acts_none"), "returned NoneType"),
        collect("agent act() returns Actions whose text is an int", env, m("acts_numbers"), "text"),
        collect("agent act() calls sys.exit(3)", env, m("acts_exits"), "sys.exit(3)"),
        collect("agent act() raises KeyboardInterrupt itself", env, m("acts_interrupts"), "KeyboardInterrupt itself"),
        collect("agent factory needs an argument", env, m("agent_needs_arguments"), m("agent_needs_arguments")),
        collect("states of 20 MB (kept whole)", m("huge_state"), agent, "", expect=0, after=kept_whole),
    ]

    # The "Why" list: solve on a scored arith-chain collection reported an expected success of 1.06.
    chain = bad / "r4p-chain"
    collect_run(config_of(CollectConfig, env=env, agent=agent, out=str(chain), episodes=48, shard_size=24,
                          explore_p=[0.0, 0.3, 0.6], seed=1))
    run_train(TrainConfig(data=str(chain), out=str(bad / "r4p-chain-prm"), model="tiny", progress=False))
    run_score(ScoreConfig(data=str(chain), model=str(bad / "r4p-chain-prm"), progress=False))

    def probabilities(out: Path):
        def check() -> str | None:
            solution = json.loads((out / "solution.json").read_text())
            found = _numbers(solution, ("success",))
            wrong = [(k, v) for k, v in found if not 0.0 <= v <= 1.0]
            return f"{wrong[0][0]}={wrong[0][1]} is not a probability" if wrong else None
        return check

    for what, extra in (("", ["--budgets", "1", "2", "3"]), (" --advice-cost 0.1", ["--advice-cost", "0.1"])):
        out = bad / f"r4p-chain-solve{len(extra)}"
        cases.append(Case(f"solve{what} on a scored arith-chain collection (expected success a probability)",
                          ["solve", "--data", str(chain), *extra, "--out", str(out)], "", expect=0,
                          after=probabilities(out)))
    tw = bad / "r4p-textworld"

    def tw_probabilities() -> str | None:
        wrong = probabilities(tw / "solve")()
        sweep = pl.read_csv(tw / "sweep" / "sweep.csv")
        outside = sweep.filter((pl.col("success") < 0) | (pl.col("success") > 1))
        return wrong or (f"sweep success {outside['success'][0]} at C={outside['budget'][0]}" if outside.height else None)

    cases.append(Case("pipeline --env textworld --agent tiny --quick --budgets 1 3 8 (expected success a probability)",
                      ["pipeline", "--env", "textworld", "--agent", "tiny", "--tw-games", "2", "--tw-quest-lengths",
                       "1", "--quick", "--episodes", "16", "--eval-episodes", "2", "--budgets", "1", "3", "8",
                       "--prm-model", "tiny", "--methods", "helper", "--device", "cpu", "--out", str(tw)], "",
                      expect=0, after=tw_probabilities))
    return cases


def _numbers(value, words, path=""):
    """(path, number) of every number in ``value`` whose key contains one of ``words``."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(item, (int, float)) and not isinstance(item, bool) and any(w in str(key) for w in words):
                found.append((where, float(item)))
            else:
                found += _numbers(item, words, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _numbers(item, words, f"{path}[{i}]")
    return found


# ------------------------------------------------------------------------------------------------------ guarantees
def guarantee_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """The "Why" list's guarantees: one certified on the fallback shown once the PRM is back, a report showing a
    guarantee calibrated before a re-distill, and a copied run's report reading the original run's helper."""
    from helper.gates.certify import GUARANTEE_FILE, helper_fingerprint
    from helper.solve.distill import DistillConfig
    from helper.solve.distill import run as distill

    bad = root / "bad"

    def guarantee(helper: Path, target: float, fingerprint: str | None = None, **changes) -> None:
        record = {"kind": "helpgate.guarantee", "eps": round(1 - target, 6), "delta": 0.1, "target": target, "n": 40,
                  "member": {"budget": 1, "success": 0.95, "interventions": 0.8}, "data_fingerprint": "sha256:x",
                  "helper_fingerprint": fingerprint or helper_fingerprint(helper), "fallback": None} | changes
        (helper / GUARANTEE_FILE).write_text(json.dumps(record))

    # Calibrated while its PRM was missing (on the fallback, recorded so), then the PRM put back where it was.
    fallback = Path(shutil.copytree(good["helper"], bad / "r4g-fallback",
                                    ignore=shutil.ignore_patterns("serve-ledger.sqlite*")))
    later = bad / "r4g-prm-later"
    config = json.loads((fallback / "helper.json").read_text())
    (fallback / "helper.json").write_text(json.dumps(config | {"prm": str(later), "prm_absolute": str(later)}))
    guarantee(fallback, 0.9, fallback=f"could not load the PRM at {later}")
    shutil.copytree(good["prm"], later)

    def run_folder(name: str) -> Path:
        """A finished run: R/helper (a copy of the good helper, its guarantee) and R/sweep recording its path."""
        run = bad / name
        shutil.copytree(good["helper"], run / "helper", ignore=shutil.ignore_patterns("serve-ledger.sqlite*"))
        (run / "sweep").mkdir()
        played = {("never", 0): [0, 0, 0, 0], ("always", 4): [1, 1, 1, 1], ("helper", 1): [1, 1, 0, 1],
                  ("random", 1): [0, 1, 0, 1]}
        pl.DataFrame([{"method": m, "budget": c, "episode_id": f"e{k}", "group": "ab"[k // 2], "success": float(v),
                       "interventions": float(min(c, 4))} for (m, c), values in played.items()
                      for k, v in enumerate(values)]).write_csv(run / "sweep" / "episodes.csv")
        (run / "sweep" / "summary.json").write_text(json.dumps({"config": {
            "env": "toy", "agent": "simulator", "helper": str((run / "helper").resolve())}}))
        guarantee(run / "helper", 0.9)
        return run

    original = run_folder("r4g-run")
    copy = Path(shutil.copytree(original, bad / "r4g-copied" / "run"))
    guarantee(copy / "helper", 0.7)
    stale = run_folder("r4g-stale")
    old = helper_fingerprint(stale / "helper")
    shutil.rmtree(stale / "helper")
    distill(DistillConfig(labels=str(good["solve"]), prm=str(good["prm"]), out=str(stale / "helper"), seed=1,
                          members=False))
    guarantee(stale / "helper", 0.9, fingerprint=old)  # calibrated on the helper before the re-distill
    report = ["--no-figures", "--resamples", "20", "--budgets", "1"]  # after the run: --budgets takes a list
    shown = bad / "r4g-copied.md"

    def copy_reads_its_own() -> str | None:
        text = shown.read_text()
        return None if "0.70 at" in text and "0.90 at" not in text else "the report shows the original run's guarantee"

    return [
        Case("evaluate, guarantee certified on the fallback, its PRM back (warned: not this gate's)",
             ["evaluate", "--helper", str(fallback), "--episodes", "2", "--questions-per-episode", "4", "--budgets",
              "0", "1", "2", "--out", str(bad / "r4g-fallback-ev")], "fallback", expect=0),
        Case("report of a copied run (shows the copy's own guarantee, not the original's)",
             ["report", f"toy={copy}", *report, "--out", str(shown)], "", expect=0, after=copy_reads_its_own),
        Case("report, guarantee calibrated before a re-distill (warned, not shown)",
             ["report", f"toy={stale}", *report, "--out", str(bad / "r4g-stale.md")], "calibrated on other helper files",
             expect=0),
    ]


GROUPS = [files_cases, kills_cases, serving_cases, cli_cases, plugin_return_cases, guarantee_cases]
"""Round four's groups, in table order (``bad_inputs.CASE_GROUPS`` ends with them)."""
