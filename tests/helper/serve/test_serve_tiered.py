"""serve-gate with a tiered helper: a real server on 127.0.0.1 answers which help to call (``kind``) as the solved
table does, keeps each episode's spend and each kind's calls in its SQLite ledger, and never grants more than the
budget or a cap: under concurrent clients, across a restart on the same ledger, and after a SIGKILL mid-traffic."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from test_serve import free_port, served_process, thread_server
from tiered_rows import PRICES, RiskScorer, rapids_rows

from examples.tiered_rapids import HORIZON, KINDS, RISKS
from helper.gates.tiered_helper_gate import TieredHelperGate
from helper.serve.gate_server import ServedGate, create_app
from helper.serve.tiered_ledger import TieredLedger
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, estimate_tiered, solve_tiered

BUDGET, CAPS, EPISODES = 6, {"human": 1}, 24


@pytest.fixture(scope="module")
def solved():
    rows = rapids_rows(1500, seed=0)
    disc = Discretizer(3, "uniform").fit(rows["prm_score"], rows["step"])
    model = estimate_tiered(rows, disc, kinds=tuple(KINDS), objective="success")
    return solve_tiered(model, Resources.of(list(PRICES.values()), BUDGET, [None, None, 1], horizon=HORIZON)), disc


def body(episode, step: int, risk: str = "dangerous") -> dict:
    return {"episode_id": f"ep-{episode}", "step": step, "state_text": f"crossing with {risk} water, marker 2"}


def test_the_served_kind_is_the_tables_and_survives_a_restart(solved, tmp_path):
    solution, disc = solved
    path = tmp_path / "ledger.sqlite"

    def serve():
        gate = TieredHelperGate(solution, disc, RiskScorer())
        return ServedGate(gate, ledger=TieredLedger(path, gate.prices, BUDGET, gate.caps))

    with thread_server(create_app(serve(), horizon=HORIZON)) as url, httpx.Client(base_url=url) as http:
        health = http.get("/health").json()
        assert health["kinds"] == list(KINDS) and health["prices"] == PRICES and health["caps"] == CAPS
        assert health["budget"] == BUDGET
        spent, human = 0.0, 0
        for step in (4, 5):  # brute force: the table at the ledger's budget and human calls left
            want = solution.kind(step, RISKS.index("dangerous"), BUDGET - spent, {"human": 1 - human})
            answer = http.post("/v1/gate", json=body("a", step)).json()
            spent += PRICES[want] if want else 0.0
            human += want == "human"
            assert answer == {"intervene": want is not None, "kind": want, "budget_left": BUDGET - spent,
                              "calls_left": {"human": 1 - human}, "score": pytest.approx(5 / 6), "horizon": HORIZON}
        assert (human, spent) == (1, BUDGET)  # the human at the rapids, then the stronger model: all spent
        retry = http.post("/v1/gate", json=body("a", 5)).json()
        assert retry["kind"] == "stronger" and retry["budget_left"] == 0  # a retry spends nothing
    # A restarted server on the same ledger: the episode's spend and its human call are still there, so the
    # dangerous crossings it is asked next get nothing (a fresh budget would call compute at step 0).
    with thread_server(create_app(serve(), horizon=HORIZON)) as url, httpx.Client(base_url=url) as http:
        later = [http.post("/v1/gate", json=body("a", s)).json() for s in range(4)]
        assert [(a["kind"], a["budget_left"], a["calls_left"], a["score"]) for a in later] == [
            (None, 0, {"human": 0}, None)] * 4
        assert http.post("/v1/episodes/ep-a/end").json() == {"episode_id": "ep-a", "used": BUDGET}
        fresh = http.post("/v1/gate", json=body("a", 0)).json()  # an ended id starts afresh
        assert fresh["kind"] == solution.kind(0, RISKS.index("dangerous"), BUDGET, {"human": 1}) == "compute"


def test_concurrent_clients_never_exceed_the_budget_or_a_cap(solved, tmp_path):
    solution, disc = solved
    gate = TieredHelperGate(solution, disc, RiskScorer())
    path = tmp_path / "ledger.sqlite"
    served = ServedGate(gate, ledger=TieredLedger(path, gate.prices, BUDGET, gate.caps))
    granted: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()
    with thread_server(create_app(served, horizon=HORIZON)) as url:
        def client(c: int) -> None:
            with httpx.Client(base_url=url, timeout=30) as http:
                for i in range(EPISODES * HORIZON):  # each client its own order; many ask the same point at once
                    j = (i * 7 + c * 11) % (EPISODES * HORIZON)
                    e, s = j % EPISODES, j // EPISODES
                    answer = http.post("/v1/gate", json=body(e, s, RISKS[(e + s) % 3]))
                    assert answer.status_code == 200, answer.text
                    if c == 0 and answer.json()["kind"]:  # one client's view holds every answer (retries agree)
                        with lock:
                            granted[f"ep-{e}"].append(answer.json()["kind"])

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client, range(8)))
    with contextlib.closing(sqlite3.connect(path)) as db:
        used = dict(db.execute("SELECT episode_id, used FROM episodes"))
        calls = {(e, k): n for e, k, n in db.execute("SELECT episode_id, kind, used FROM kind_calls")}
    assert len(used) == EPISODES
    for e in range(EPISODES):
        kinds = granted[f"ep-{e}"]
        assert sum(PRICES[k] for k in kinds) == used[f"ep-{e}"] <= BUDGET
        assert all(calls[(f"ep-{e}", k)] == kinds.count(k) for k in KINDS) and kinds.count("human") <= 1


def test_two_processes_on_one_ledger_never_pass_a_cap(tmp_path):
    """Two ledgers on one file (two servers) grant from many threads at once: the cap and budget hold."""
    path = tmp_path / "ledger.sqlite"
    first, second = (TieredLedger(path, PRICES, 9, {"human": 1}) for _ in range(2))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: (first if i % 2 else second).record_kind(
            "e", i, "", ["human", "stronger", "compute"][i % 3], None, HORIZON), range(24)))
    made = [a[0] for a in answers if a[0]]
    assert made.count("human") == 1 and sum(PRICES[k] for k in made) <= 9
    assert first.spent("e") == (sum(PRICES[k] for k in made), {k: made.count(k) for k in KINDS})
    with pytest.raises(ValueError, match="pass --ledger a new path"):
        TieredLedger(path, {"compute": 2, "stronger": 2, "human": 4}, 9)  # other prices: its spends would misread


def test_a_killed_server_restarted_never_grants_more_than_the_budget(tmp_path):
    """SIGKILL mid-traffic, twice, on a tiered helper folder served without a PRM (its conservative rule with kinds)."""
    rows = rapids_rows(600, seed=2)
    disc = Discretizer(3, "uniform").fit(rows["prm_score"], rows["step"])
    model = estimate_tiered(rows, disc, kinds=tuple(KINDS), objective="success")
    sol = solve_tiered(model, Resources.of(list(PRICES.values()), BUDGET, [None, None, 1], horizon=HORIZON))
    folder = TieredHelperGate(sol, disc, trained_on={"horizon": HORIZON}).save(tmp_path / "helper")
    ledger = tmp_path / "ledger.sqlite"
    args = ["serve-gate", "--helper", str(folder), "--ledger", str(ledger)]
    answers: dict[tuple[int, int], str | None] = {}
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def traffic():
        def client(c):
            order = [(e, s) for s in range(HORIZON) for e in range(EPISODES)]
            with httpx.Client(base_url=url, timeout=10) as http:
                for e, s in order[c * 7:] + order[:c * 7]:
                    if (e, s) in answers:
                        continue
                    try:
                        answer = http.post("/v1/gate", json=body(e, s))
                    except httpx.HTTPError:
                        return
                    assert answer.status_code == 200, answer.text
                    answers[(e, s)] = answer.json()["kind"]

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client, range(8)))

    for round_ in range(3):
        with served_process(args, port) as process:
            if round_ < 2:
                def kill(before=len(answers)):
                    while len(answers) < before + EPISODES and process.poll() is None:
                        time.sleep(0.002)
                    process.send_signal(signal.SIGKILL)

                killer = threading.Thread(target=kill)
                killer.start()
                traffic()
                killer.join(timeout=60)
                process.wait(timeout=10)
                assert process.returncode == -signal.SIGKILL and len(answers) < EPISODES * HORIZON
            else:
                traffic()
                assert len(answers) == EPISODES * HORIZON
                assert httpx.get(f"{url}/health", timeout=10).json()["kinds"] == list(KINDS)
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        used = dict(db.execute("SELECT episode_id, used FROM episodes"))
    for e in range(EPISODES):
        kinds = [answers[(e, s)] for s in range(HORIZON) if answers[(e, s)]]
        assert sum(PRICES[k] for k in kinds) == used[f"ep-{e}"] <= BUDGET  # what the clients heard, all committed
    assert any(used.values())  # the rule spent: late steps call the cheapest kind


def test_a_ledger_written_before_kinds_opens_and_keeps_its_counts(tmp_path):
    """A one-kind ledger file of the earlier schema (answers without kind columns, no kind_calls) is read as it was."""
    from helper.serve.ledger import KIND, Ledger

    path = tmp_path / "old.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE episodes (episode_id TEXT PRIMARY KEY, budget INTEGER NOT NULL, used INTEGER NOT NULL,
                                   horizon INTEGER NOT NULL, last_seen REAL NOT NULL);
            CREATE TABLE answers (episode_id TEXT NOT NULL, step INTEGER NOT NULL, request TEXT NOT NULL,
                                  intervene INTEGER NOT NULL, budget_left INTEGER NOT NULL, score REAL,
                                  PRIMARY KEY (episode_id, step, request));""")
        db.execute("INSERT INTO meta VALUES ('kind', ?), ('version', '1')", (KIND,))
        db.execute("INSERT INTO episodes VALUES ('a', 2, 1, 4, 0.0)")
        db.execute("INSERT INTO answers VALUES ('a', 0, '', 1, 1, 0.9)")
        db.commit()
    ledger = Ledger(path, 2)
    assert ledger.left("a") == 1 and ledger.answer("a", 0, "") == (True, 1, 0.9)
    assert ledger.record("a", 1, "", True, 0.8, 4)[:2] == (True, 0)
    assert ledger.record("a", 2, "", True, 0.8, 4)[0] is False
    assert ledger.end("a") == 2
