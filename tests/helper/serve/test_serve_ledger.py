"""serve-gate's budgets survive a crash (``helper.serve.ledger``): a real server on 127.0.0.1 killed with SIGKILL
mid-traffic and restarted on the same ledger never grants an episode more than its budget; ids and steps are
checked so that every live episode can be ended; idle episodes are reaped; a port in use is one line."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import polars as pl
import pytest
from one_line_errors import one_error_line
from test_serve import free_port, served_process, thread_server

from agile.budget import BudgetedGate
from helper.commands.cli import main
from helper.serve.gate_server import ServedGate, create_app
from helper.serve.ledger import Ledger

BUDGET, HORIZON, EPISODES = 2, 6, 24


@pytest.fixture(scope="module")
def always(tmp_path_factory):
    """A helper folder (no PRM) whose threshold 0 wants every decision: each episode is granted exactly its budget."""
    from helper.gates.features import FeatureClassifier, frame_features
    from helper.gates.helper_gate import HelperGate

    rng = np.random.default_rng(0)
    hard = rng.random(200) < 0.4
    frame = pl.DataFrame({"step": np.arange(200) % HORIZON, "horizon": [HORIZON] * 200,
                          "budget_left": rng.integers(1, 3, 200),
                          "features": [f'{{"type_reasoning_qa": {float(h)}}}' for h in hard]})
    names = ["step", "progress", "budget_left", "budget_per_step", "f_type_reasoning_qa"]
    fallback = FeatureClassifier("logreg", names).fit(frame_features(frame, names), hard.astype(int))
    folder = tmp_path_factory.mktemp("always")
    HelperGate("features", fallback, fallback, solved_budget=BUDGET, threshold=0.0,
               trained_on={"horizon": HORIZON}).save(folder)
    return folder


def body(episode: int, step: int) -> dict:
    return {"episode_id": f"ep-{episode}", "step": step, "state_text": f"state {step}",
            "features": {"type_reasoning_qa": 1.0}}


def traffic(url: str, granted: dict, answered: set, clients: int = 8) -> None:
    """Clients ask every (episode, step) not answered yet, each in its own order (a decision point is often asked
    by several at once: a retry), as agents that go on with their episodes: a step answered before a kill is not
    asked again. Each granted decision point is added to ``granted[episode]``. Returns when every decision point is
    answered or the server is gone."""

    def client(c: int) -> None:
        order = [(e, s) for s in range(HORIZON) for e in range(EPISODES)]
        order = order[c * 7 % len(order):] + order[:c * 7 % len(order)]
        with httpx.Client(base_url=url, timeout=10) as http:
            for e, s in order:
                if (e, s) in answered:
                    continue
                try:
                    answer = http.post("/v1/gate", json=body(e, s))
                except httpx.HTTPError:  # killed: whatever it committed is in the ledger
                    return
                assert answer.status_code == 200, answer.text
                if answer.json()["intervene"]:
                    granted[f"ep-{e}"].add(s)
                answered.add((e, s))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))


def test_a_server_killed_mid_traffic_and_restarted_never_grants_more_than_the_budget(always, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    args = ["serve-gate", "--helper", str(always), "--budget", str(BUDGET), "--ledger", str(ledger)]
    granted: dict[str, set[int]] = defaultdict(set)
    answered: set[tuple[int, int]] = set()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    for round_ in range(3):
        with served_process(args, port) as process:  # SIGKILLed at the end if still running
            if round_ < 2:  # SIGKILL once some answers are in: mid-traffic, decisions in flight
                def kill(process=process, before=len(answered)):
                    while len(answered) < before + 2 * EPISODES and process.poll() is None:
                        time.sleep(0.002)
                    process.send_signal(signal.SIGKILL)

                killer = threading.Thread(target=kill)
                killer.start()
                traffic(url, granted, answered)
                killer.join(timeout=60)
                process.wait(timeout=10)
                assert process.returncode == -signal.SIGKILL and len(answered) < EPISODES * HORIZON
            else:  # the last server answers every decision point left
                traffic(url, granted, answered)
                assert len(answered) == EPISODES * HORIZON
                # Each episode was granted its whole budget (the gate wants every decision), never more, in 3 lives.
                assert {e: len(steps) for e, steps in granted.items()} == {f"ep-{e}": BUDGET for e in range(EPISODES)}
                # A retry of a decision granted before a kill gets its first answer, spending nothing.
                again = httpx.post(f"{url}/v1/gate", json=body(0, min(granted["ep-0"])), timeout=10).json()
                assert again["intervene"] is True
                assert httpx.post(f"{url}/v1/episodes/ep-0/end", timeout=10).json() == {"episode_id": "ep-0",
                                                                                       "used": BUDGET}
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        used = dict(db.execute("SELECT episode_id, used FROM episodes").fetchall())
    assert used == {f"ep-{e}": BUDGET for e in range(1, EPISODES)}


class Wants(BudgetedGate):
    """Wants every decision; remembers the episodes the server ended."""

    def __init__(self):
        super().__init__(budget=None)
        self.ended: list[str] = []

    def wants(self, observation, budget_left):
        return True

    def end_episode(self, episode_id):
        self.ended.append(episode_id)


def ask(http, **changes) -> httpx.Response:
    return http.post("/v1/gate", json={"episode_id": "e", "step": 0, "state_text": "s"} | changes)


def test_ids_and_steps_that_could_never_be_ended_are_422_naming_the_field():
    with thread_server(create_app(ServedGate(Wants(), budget=2), horizon=4)) as url, httpx.Client(base_url=url) as http:
        for episode_id in ("a/b", "x" * 300_000, "..", "with space", ""):
            answer = ask(http, episode_id=episode_id)
            assert answer.status_code == 422, episode_id[:20]
            assert ["body", "episode_id"] in [e["loc"] for e in answer.json()["detail"]]
        for step in (10**18, 10**19):
            answer = ask(http, step=step)
            assert answer.status_code == 422 and ["body", "step"] in [e["loc"] for e in answer.json()["detail"]]
        assert ask(http, episode_id="ok-1:a.b").status_code == 200
        # /actions: a step past the episode's horizon, or of 10^18, is refused as /v1/gate refuses it.
        assert ask(http, horizon=3).status_code == 200
        past = http.post("/v1/episodes/e/actions", json={"step": 3, "action_text": "x"})
        assert past.status_code == 422 and "horizon 3" in past.json()["detail"]
        huge = http.post("/v1/episodes/e/actions", json={"step": 10**18, "action_text": "x"})
        assert huge.status_code == 422 and "step" in huge.text
        assert http.post("/v1/episodes/e/actions", json={"step": 2, "action_text": "x"}).status_code == 200
        assert http.post("/v1/episodes/e/end").json() == {"episode_id": "e", "used": 1}


def test_episodes_idle_past_the_limit_are_reaped():
    now = [1000.0]
    inner = Wants()
    gate = ServedGate(inner, budget=2, ledger=Ledger(None, 2, idle_s=30.0, clock=lambda: now[0]))
    with thread_server(create_app(gate, horizon=4)) as url, httpx.Client(base_url=url) as http:
        assert ask(http, episode_id="old").json()["budget_left"] == 1
        now[0] += 20
        assert ask(http, episode_id="young").json()["budget_left"] == 1
        assert http.post("/v1/episodes/old/actions", json={"step": 1, "action_text": "x"}).status_code == 200
        now[0] += 20  # "old" was touched 20 s ago (its action), "young" 20 s ago: neither is idle past 30 s
        assert ask(http, episode_id="third").status_code == 200 and gate.live_episodes() == 3
        now[0] += 31
        assert ask(http, episode_id="fourth").status_code == 200
        assert gate.live_episodes() == 1 and sorted(inner.ended) == ["old", "third", "young"]
        gone = http.post("/v1/episodes/old/end")
        assert gone.status_code == 404 and "--idle-episode-s" in gone.json()["detail"]
        assert ask(http, episode_id="old").json()["budget_left"] == 1  # a reaped id starts afresh


def test_a_restart_with_another_budget_keeps_each_episodes_own(tmp_path):
    path = tmp_path / "ledger.sqlite"
    first = Ledger(path, 2)
    assert [first.record("a", s, "", True, 1.0, 4)[:2] for s in range(3)] == [(True, 1), (True, 0), (False, 0)]
    first.close()
    second = Ledger(path, 5)
    assert second.left("a") == 0 and second.record("a", 3, "", True, 1.0, 4)[:2] == (False, 0)
    assert second.answer("a", 0, "") == (True, 1, 1.0)  # the answers given before the restart
    assert second.record("b", 0, "", True, 1.0, 4)[:2] == (True, 4)


def test_a_port_in_use_and_a_file_that_is_no_ledger_are_one_line(always, tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["serve-gate", "--helper", str(always), "--port", str(port), "--ledger",
                     str(tmp_path / "l.sqlite")]) == 2
        line = one_error_line(capsys)
        assert f"port={port}: already in use" in line and "--port" in line
    text = tmp_path / "notes.txt"
    text.write_text("not a database, and longer than a SQLite header would be " * 4)
    assert main(["serve-gate", "--helper", str(always), "--port", str(free_port()), "--ledger", str(text)]) == 2
    line = one_error_line(capsys)
    assert "notes.txt: not a serve-gate ledger" in line and "--ledger" in line
