"""serve-gate refuses what it cannot trust, on a small run of the main job (ProductQA, simulator
agent, tiny PRM, decide after the proposal), with real servers on 127.0.0.1: its decisions are the
in-process gate's; features are checked on every request; the horizon is the helper's; a missing or
broken PRM does not start without --allow-fallback; a large body is a 413 at once."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace

import httpx
import pytest
from productqa_slice import SLICE
from test_serve import cli_server

from agile.agents.simulator_agent import SimulatorAgent
from agile.protocol import Action
from helper import HelperGate
from helper.commands.cli import main
from helper.data.environment import EnvSetup, EnvSpec
from helper.gates.identity import UntrustedPrm, prm_fingerprint

BUDGET = 2
HORIZON = 4
DATA = ["--data", str(SLICE), "--memory", "lexical"]
"""The bundled ProductQA slice, with memory that needs no embedding model: the pipeline's episodes
and the held-out ones below come from the same spec."""
FEATURES = ["memory_advice_hits", "memory_entries", "memory_similar_count", "memory_top_similarity",
            "retrieved_tokens"]
"""The executor's features (``agile.executor.executor``), the helper's inputs besides the PRM score."""
SPEC = EnvSpec(env="productqa", agent="simulator", data=str(SLICE), memory="lexical", questions_per_episode=HORIZON)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("main") / "run"
    assert main(["pipeline", "--out", str(out), "--quick", "--agent", "simulator", "--prm-model", "tiny",
                 "--episodes", "32", "--eval-episodes", "4", "--questions-per-episode", str(HORIZON),
                 "--budgets", *map(str, range(1, BUDGET + 1)), "--methods", "helper", *DATA],
                experiments=True) == 0  # --memory lexical (no MiniLM to load): an experiment's option
    return out


@pytest.fixture(scope="module")
def served(run_dir):
    with cli_server(["serve-gate", "--helper", str(run_dir / "helper"), "--budget", str(BUDGET)]) as url:
        yield url


def held_out(n: int, seed: int) -> list:
    """Held-out episodes of the pipeline's environment (the test split)."""
    return EnvSetup(SPEC, "test").episodes(range(n), seed)


def first_observation(seed: int):
    """The first decision point of a held-out episode."""
    return held_out(1, seed)[0].observe()


def body(observation, proposal: str, **changes) -> dict:
    """The README's request body: no horizon (the helper's), the observation's own features."""
    return {"episode_id": observation.episode_id, "step": observation.step, "state_text": observation.state_text,
            "features": observation.features, "proposal": proposal} | changes


def test_the_helper_folder_records_what_it_was_built_with(run_dir):
    config = json.loads((run_dir / "helper" / "helper.json").read_text())
    assert config["horizon"] == HORIZON and config["decide_after"] == "proposal"
    assert config["feature_names"][0] == "prm_score" and "f_memory_top_similarity" in config["feature_names"]
    assert config["fallback_feature_names"] == [n for n in config["feature_names"] if n != "prm_score"]
    assert config["prm_fingerprint"] == prm_fingerprint(run_dir / "prm")


def test_served_decisions_are_the_in_process_decisions(run_dir, served):
    gate = HelperGate.load(run_dir / "helper", budget=BUDGET)
    assert gate.scorer is not None and gate.degraded is None
    agent = SimulatorAgent(seed=0)
    episodes = held_out(10, seed=1000)
    decided, answers = [], []
    with httpx.Client(base_url=served, timeout=60) as http:
        assert http.get("/health").json() | {"gate": None} == {
            "status": "ok", "gate": None, "budget": BUDGET, "decide_after": "proposal", "horizon": HORIZON,
            "features": FEATURES, "guarantee": None}
        for episode in episodes:
            while not episode.done:
                observation = episode.observe()
                proposal = agent.act([observation], [episode])[0].text
                left = BUDGET - gate.used(observation.episode_id)
                p = gate.intervene_probability(observation, left, Action(proposal)) if left else None
                local = gate.should_intervene(observation, proposal=Action(proposal))
                answer = http.post("/v1/gate", json=body(observation, proposal))
                assert answer.status_code == 200, answer.text
                remote = answer.json()
                assert remote["intervene"] == local and remote["budget_left"] == BUDGET - gate.used(episode.episode_id)
                assert remote["horizon"] == HORIZON
                assert (remote["score"] is None) == (p is None)
                answers.append(local)
                if p is not None:
                    assert remote["score"] == pytest.approx(p, abs=1e-9)
                    decided.append(local)
                action = episode.expert_action().text if local else proposal
                gate.record_action(observation, action)
                if local:  # the server recorded a kept proposal itself; a human's answer is sent
                    http.post(f"/v1/episodes/{episode.episode_id}/actions",
                              json={"step": observation.step, "action_text": action}).raise_for_status()
                episode.step(Action(action))
            gate.end_episode(episode.episode_id)
            assert http.post(f"/v1/episodes/{episode.episode_id}/end").json()["used"] <= BUDGET
    # Both answers occur, every decision with budget left scored by the PRM (no fallback anywhere). (The member
    # chosen for this cap on the training folds may ask wherever budget is left: the tiny PRM ranks nothing.)
    assert len(decided) >= 20 and sum(decided) > 0 and 0 < sum(answers) < len(answers)
    assert gate.stats()["fallbacks"] == 0


def test_features_are_checked_on_every_request(run_dir, served):
    observation = first_observation(seed=7)
    good = body(observation, "[PredictAnswer] yes", episode_id="feat")
    with httpx.Client(base_url=served, timeout=60) as http:
        for round_ in range(3):  # after good requests as much as before them
            assert http.post("/v1/gate", json=good | {"step": round_}).status_code == 200
            empty = http.post("/v1/gate", json=good | {"step": round_, "features": {}})
            assert empty.status_code == 422
            assert f"features: missing {FEATURES}" in empty.json()["detail"]
            partial = {k: v for k, v in observation.features.items() if k != "memory_entries"} | {"colour": 1.0}
            wrong = http.post("/v1/gate", json=good | {"step": round_, "features": partial})
            assert wrong.status_code == 422
            assert "features: missing ['memory_entries']; unknown ['colour']" in wrong.json()["detail"]
            nan = json.dumps(good | {"step": round_, "features": observation.features | {"memory_entries": "NaN"}})
            refused = http.post("/v1/gate", content=nan.replace('"NaN"', "NaN"),
                                headers={"content-type": "application/json"})
            assert refused.status_code == 422 and "memory_entries" in refused.text and "finite" in refused.text
        # Refused requests spend nothing: the episode's count is that of the three good ones.
        used = http.post("/v1/episodes/feat/end").json()["used"]
    gate = HelperGate.load(run_dir / "helper", budget=BUDGET)
    expected = 0
    for step in range(3):
        good_observation = replace(observation, episode_id="feat", step=step)
        granted = gate.should_intervene(good_observation, proposal=Action("[PredictAnswer] yes"))
        expected += granted
        if not granted:  # as the server does: a kept proposal is the step's action
            gate.record_action(good_observation, "[PredictAnswer] yes")
    assert used == expected


def test_the_horizon_is_the_helpers(run_dir, served, capsys):
    observation = first_observation(seed=8)
    with httpx.Client(base_url=served, timeout=60) as http:
        longer = http.post("/v1/gate", json=body(observation, "x", episode_id="h1", horizon=HORIZON + 4))
        assert longer.status_code == 422 and f"horizon={HORIZON + 4}" in longer.json()["detail"]
        assert f"at most {HORIZON} decision points" in longer.json()["detail"]
        shorter = http.post("/v1/gate", json=body(observation, "x", episode_id="h2", horizon=2))
        assert shorter.status_code == 200 and shorter.json()["horizon"] == 2
        past = http.post("/v1/gate", json=body(observation, "x", episode_id="h3", step=HORIZON))
        assert past.status_code == 422 and f"horizon {HORIZON}" in past.json()["detail"]
    # The server's --horizon cannot contradict the helper's; an old folder without one needs it.
    assert main(["serve-gate", "--helper", str(run_dir / "helper"), "--horizon", "8"]) == 2
    assert "--horizon 8: the helper was trained on horizon 4" in error_line(capsys.readouterr().err)
    old = run_dir.parent / "old-helper"
    shutil.copytree(run_dir / "helper", old)
    config = json.loads((old / "helper.json").read_text())
    config.pop("horizon"), config["trained_on"].pop("horizon")
    (old / "helper.json").write_text(json.dumps(config))
    assert main(["serve-gate", "--helper", str(old)]) == 2
    err = error_line(capsys.readouterr().err)
    assert "records no horizon" in err and "pass --horizon" in err


def error_line(err: str) -> str:
    """The one line the CLI prints for a refused command (model loading may print progress bars)."""
    (line,) = [line for line in err.splitlines() if line.startswith("helpgate serve-gate: error:")]
    return line


def _helper_with_prm(run_dir, name: str, prm) -> str:
    """A copy of the run's helper folder whose recorded PRM is ``prm`` (relative and absolute)."""
    folder = run_dir.parent / name
    shutil.copytree(run_dir / "helper", folder)
    config = json.loads((folder / "helper.json").read_text()) | {"prm": str(prm), "prm_absolute": str(prm)}
    (folder / "helper.json").write_text(json.dumps(config))
    return str(folder)


def test_a_missing_or_broken_prm_needs_allow_fallback(run_dir, capsys):
    missing = _helper_with_prm(run_dir, "no-prm", run_dir.parent / "gone")
    broken_prm = run_dir.parent / "broken-prm"
    shutil.copytree(run_dir / "prm", broken_prm)
    (broken_prm / "head.safetensors").write_bytes(b"not a tensor file")
    broken = _helper_with_prm(run_dir, "broken", broken_prm)

    assert main(["serve-gate", "--helper", missing]) == 2
    err = error_line(capsys.readouterr().err)
    assert "could not load the PRM at" in err and "gone" in err and "--allow-fallback" in err
    assert main(["serve-gate", "--helper", broken]) == 2
    err = error_line(capsys.readouterr().err)
    assert "prm_fingerprint=sha256:" in err and "broken-prm" in err and "--allow-fallback" in err
    # In process: a missing PRM takes the documented fallback, saying why; a wrong one is refused.
    with pytest.warns(UserWarning, match="could not load the PRM"):
        assert "gone" in HelperGate.load(missing).degraded
    with pytest.raises(UntrustedPrm, match="prm_fingerprint"):
        HelperGate.load(broken)

    observation = first_observation(seed=9)
    for folder, reason in ((missing, "gone"), (broken, "prm_fingerprint")):
        with cli_server(["serve-gate", "--helper", folder, "--allow-fallback"]) as url:
            health = httpx.get(f"{url}/health").json()
            assert health["status"] == "degraded" and reason in health["reason"]
            answer = httpx.post(f"{url}/v1/gate", json=body(observation, "[PredictAnswer] yes"), timeout=60)
            assert answer.status_code == 200 and 0.0 <= answer.json()["score"] <= 1.0


def test_a_large_body_is_refused_at_once(served):
    observation = first_observation(seed=10)
    large = body(observation, "x", episode_id="big", state_text="word " * 800_000)  # 4 MB
    with httpx.Client(base_url=served, timeout=60) as http:
        small = http.post("/v1/gate", json=body(observation, "x", episode_id="small"))
        assert small.status_code == 200
        started = time.perf_counter()
        answer = http.post("/v1/gate", json=large)
        took = time.perf_counter() - started
        assert answer.status_code == 413 and "limit of 1048576 bytes" in answer.json()["detail"]
        # Unparsed, never near the PRM (which takes tens of seconds on 4 MB): well under a second.
        assert took < 2.0, took

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(64):
                yield b"x" * 65536

        assert http.post("/v1/gate", content=chunks(), headers={"content-type": "application/json"}).status_code == 413
        # The server goes on answering, and a body under the limit is parsed as usual.
        near = body(observation, "x", episode_id="near", state_text="word " * 20_000)
        assert http.post("/v1/gate", json=near).status_code == 200
        lone = (b'{"episode_id": "u", "step": 0, "state_text": "\\ud800", "proposal": "x", "features": '
                + json.dumps(observation.features).encode() + b"}")
        bad = http.post("/v1/gate", content=lone, headers={"content-type": "application/json"})
        assert bad.status_code == 422 and "state_text" in bad.text and "surrogate" in bad.text


def test_a_body_limit_below_one_byte_is_refused(tmp_path, capsys):
    assert main(["serve-gate", "--helper", str(tmp_path), "--max-body-bytes", "0"]) == 2
    assert "max_body_bytes=0 must be >= 1" in error_line(capsys.readouterr().err)
