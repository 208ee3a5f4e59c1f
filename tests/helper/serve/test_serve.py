"""Real servers on 127.0.0.1: ``helpgate serve`` (chat completions over the tiny model) driven by
``openai:tiny`` agents through collection, and ``serve-gate`` under concurrent clients."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import polars as pl
import pytest
from productqa_slice import SLICE

from agile.agents.openai_agent import OpenAIAgent, function_margin, is_retry, question_of, table_of, written_turn
from agile.budget import BudgetedGate
from agile.envs.phrasing import is_yes_no_question
from agile.functions import parse_call
from agile.protocol import Observation
from helper.serve.gate_server import ServedGate
from trajectories.number_maps import number_maps

ROOT = Path(__file__).resolve().parents[3]
ENV = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                    "PYTHONPATH": str(ROOT)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def cli_server(args: list[str], timeout: float = 120.0):
    """``python -m helper.commands.cli ARGS --port P`` in a subprocess; yields its base URL once /health answers."""
    port = free_port()
    with served_process(args, port, timeout) as process:
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass  # served_process kills it


@contextlib.contextmanager
def served_process(args: list[str], port: int, timeout: float = 120.0):
    """``python -m helper.commands.cli ARGS --port PORT`` in a subprocess; yields the process once /health answers,
    and kills it (SIGKILL) when the block ends if it is still running."""
    # A file, not a pipe: a server that logs more than a pipe holds would block on a full pipe.
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen([sys.executable, "-m", "helper.commands.cli", *args, "--port", str(port)], cwd=ROOT,
                                   env=ENV, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"server exited with {process.returncode}: {log.read()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"server {args} did not answer /health within {timeout} s")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                        break
                time.sleep(0.2)
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def thread_server(app):
    """``app`` on uvicorn in a thread of this process; stopped (should_exit, bounded join) on exit."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the in-thread server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# -- helpgate serve: the chat-completions server ----------------------------------------------


@pytest.fixture(scope="module")
def model_server():
    with cli_server(["serve", "--model", "tiny"]) as url:
        yield url


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=0)  # the weights the server built from the same seed


def test_logprobs_and_errors_match_the_model(model_server, tiny):
    import openai
    import torch

    model, tokenizer = tiny
    client = openai.OpenAI(base_url=f"{model_server}/v1", api_key="local", max_retries=0, timeout=30)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is it waterproof?"},
                {"role": "assistant", "content": "[PredictAnswer]"}]
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=3, temperature=0,
                                           logprobs=True, top_logprobs=5,
                                           extra_body={"continue_final_message": True, "add_generation_prompt": False})
    # Brute force: the same prompt through the model in this process.
    prompt = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True) + "[PredictAnswer]"
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        log_probs = torch.log_softmax(model(ids).logits[0, -1].float(), dim=-1)
    top = torch.topk(log_probs, 5)
    first = reply.choices[0].logprobs.content[0]
    assert [t.token for t in first.top_logprobs] == [tokenizer.decode([i]) for i in top.indices.tolist()]
    assert [t.logprob for t in first.top_logprobs] == pytest.approx(top.values.tolist(), abs=1e-4)
    assert first.token == tokenizer.decode([int(top.indices[0])])  # greedy takes the top token
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.prompt_tokens == ids.shape[1]

    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=messages[:2], max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="stream"):
        client.chat.completions.create(model="tiny", messages=messages[:2], max_tokens=1, stream=True)
    with pytest.raises(openai.BadRequestError, match="at most"):
        client.chat.completions.create(model="tiny", messages=messages[:2], max_tokens=10_000)
    with pytest.raises(openai.BadRequestError, match="context of 2048 tokens"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "word " * 3000}])
    with pytest.raises(openai.BadRequestError, match=r"messages\.0\.role"):
        client.chat.completions.create(model="tiny", messages=[{"role": "robot", "content": "hi"}])
    # A lone surrogate is valid JSON that no tokenizer encodes: a 400 naming the field, not a 500.
    lone = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi \\ud800"}], "max_tokens": 1}'
    answer = httpx.post(f"{model_server}/v1/chat/completions", content=lone,
                        headers={"content-type": "application/json"}, timeout=30)
    assert answer.status_code == 400 and "messages.0.content" in answer.text and "surrogate" in answer.text
    assert httpx.post(f"{model_server}/v1/chat/completions", timeout=30, json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).status_code == 200


def mixed_observations(n_episodes: int, seed: int = 0) -> list[Observation]:
    """Decision points of the executor's ProductQA episodes (questions phrased as yes/no and others),
    and after each question not phrased so, the retry the executor asks for after a failed query."""
    from agile.executor.episode import AgileSource
    from agile.protocol import Action

    observations = []
    for episode in AgileSource(SLICE, "train", model=None, memory="lexical").episodes(range(n_episodes), seed, 3):
        while not episode.done:
            observations.append(episode.observe())
            if not yes_no(observations[-1]):
                probe = episode.clone()
                result = probe.step(Action("[SearchProduct] SELECT product_id FROM nowhere;"))
                assert result.info["tool"] == "[Error]"
                observations.append(probe.observe())
            episode.step(episode.expert_action())
    assert {True, False} <= {yes_no(o) for o in observations} and any(map(retry, observations))
    return observations


def yes_no(observation: Observation) -> bool:
    return is_yes_no_question(question_of(observation.state_text))


def retry(observation: Observation) -> bool:
    return is_retry(observation.state_text)


YES_NO_TOKENS = (" yes", " Yes", " no", " No")


class Served:
    """What the served model's own log-probabilities say, computed in this process on the same weights:
    the prompt is the context as the one user message, the reply started by ``prefix``."""

    def __init__(self, model, tokenizer, top_logprobs: int = 20, max_tokens: int = 48):
        self.model, self.tokenizer = model, tokenizer
        self.top_logprobs, self.max_tokens = top_logprobs, max_tokens

    def ids(self, observation: Observation, prefix: str):
        messages = [{"role": "user", "content": observation.state_text}]
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefix
        return self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]

    def log_probs(self, observation: Observation, prefix: str):
        import torch

        with torch.no_grad():
            return torch.log_softmax(self.model(self.ids(observation, prefix)).logits[0, -1].float(), dim=-1)

    def top(self, observation: Observation, prefix: str) -> list[tuple[str, float]]:
        import torch

        top = torch.topk(self.log_probs(observation, prefix), self.top_logprobs)
        return [(self.tokenizer.decode([i]), float(v)) for v, i in zip(top.values, top.indices.tolist())]

    def line(self, observation: Observation, prefix: str) -> str:
        """The greedy continuation after ``prefix``, up to its first newline."""
        import torch

        ids = self.ids(observation, prefix)
        with torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=self.max_tokens, do_sample=False, temperature=None,
                                      top_p=None, top_k=None, attention_mask=torch.ones_like(ids),
                                      pad_token_id=self.tokenizer.pad_token_id)
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).split("\n", 1)[0].strip()

    def yes_no_margin(self, observation: Observation) -> float | None:
        """log P(" yes" or " Yes") - log P(" no" or " No") after ``[PredictAnswer]``, over the whole
        vocabulary; None when none of the four is among the top tokens (the generated token decides)."""
        log_probs = self.log_probs(observation, "[PredictAnswer]")
        shown = {token for token, _ in self.top(observation, "[PredictAnswer]")} & set(YES_NO_TOKENS)
        if not shown:
            return None
        # The agent sees the top tokens only: its margin is this one when all four are among them.
        assert shown == set(YES_NO_TOKENS), f"only {sorted(shown)} among the top tokens"
        yes, no = (log_probs[[self.token_id(t) for t in pair]].logsumexp(0) for pair in (YES_NO_TOKENS[:2],
                                                                                         YES_NO_TOKENS[2:]))
        return float(yes - no)

    def token_id(self, token: str) -> int:
        (i,) = self.tokenizer(token, add_special_tokens=False)["input_ids"]
        return i

    def expected(self, observation: Observation) -> tuple[str, int]:
        """The turn the model's log-probabilities give, and the requests it takes."""
        if yes_no(observation):
            margin = self.yes_no_margin(observation)
            if margin is None:  # the generated (greedy) token decides
                answer = "yes" if self.top(observation, "[PredictAnswer]")[0][0].strip().lower() == "yes" else "no"
            else:
                answer = "yes" if margin > 0 else "no"
            return f"[PredictAnswer] {answer}", 1
        if retry(observation):  # answered, without deciding again
            return f"[PredictAnswer] {self.line(observation, '[PredictAnswer]')}".rstrip(), 1
        top = self.top(observation, "[")
        margin = function_margin(top)
        if margin is None:  # neither function among the top tokens: the generated (greedy) one decides
            token = top[0][0].strip()
            searched = bool(token) and "SearchProduct]".startswith(token)
        else:
            searched = margin > 0
        if searched:
            prefix = f"[SearchProduct] SELECT product_id FROM `{table_of(observation.state_text)}` WHERE"
            sql = self.line(observation, prefix).split(";", 1)[0].strip()
            return f"{prefix} {sql};", 2
        return f"[PredictAnswer] {self.line(observation, '[PredictAnswer]')}".rstrip(), 2


def completions(url: str) -> int:
    return httpx.get(f"{url}/health").json()["completions"]


def test_openai_agent_acts_as_the_served_log_probabilities_say(model_server, tiny):
    observations = mixed_observations(2)
    agent = OpenAIAgent("tiny", base_url=f"{model_server}/v1", concurrency=4)
    before = completions(model_server)
    remote = agent.act(observations)
    served = Served(*tiny)
    expected = [served.expected(o) for o in observations]
    assert [a.text for a in remote] == [text for text, _ in expected]
    # One request per turn, two where the model first decides whether to search; a retry answers
    # without deciding again (so the executor's retries end).
    assert completions(model_server) - before == sum(n for _, n in expected)
    assert all(a.text.startswith("[PredictAnswer]") for o, a in zip(observations, remote) if retry(o))
    # The search decision is the served first-token log-probabilities' (the random tiny model has
    # neither function token among its top 20: the token it generates, not "Search", decides).
    for observation in observations:
        if not yes_no(observation) and not retry(observation):
            margin = function_margin(served.top(observation, "["))
            assert agent.search_margin(observation) == (-math.inf if margin is None else pytest.approx(margin, abs=1e-4))
    # No annotation is read: without the question type every action is the same.
    blind = [dataclasses.replace(o, annotations={}) for o in observations]
    assert [a.text for a in agent.act(blind)] == [a.text for a in remote]
    assert OpenAIAgent("tiny", base_url=f"{model_server}/v1").act([]) == []


def test_without_prefill_the_model_writes_the_line(model_server, tiny):
    """Endpoints that cannot continue a message: the model writes the whole line; a line without a
    function token is the answer, a yes/no question reads the answer's first word, a retry answers."""
    observations = mixed_observations(1)
    loose = OpenAIAgent("tiny", base_url=f"{model_server}/v1", prefill=False, max_tokens=8)
    served = Served(*tiny, max_tokens=8)
    for observation, action in zip(observations, loose.act(observations)):
        line = served.line(observation, "")
        if yes_no(observation):
            call = parse_call(line)
            words = (call.argument if call else line).split()
            assert action.text == f"[PredictAnswer] {'yes' if words[:1] == ['yes'] else 'no'}"
        else:
            assert action.text == written_turn(line, answer=retry(observation))
        assert action.text.startswith("[PredictAnswer]" if retry(observation) else ("[PredictAnswer]", "[SearchProduct]"))
    assert written_turn("Sure. [SearchProduct] SELECT 1;") == "[SearchProduct] SELECT 1;"
    assert written_turn("[SearchProduct] SELECT 1;", answer=True) == "[PredictAnswer] SELECT 1;"
    assert written_turn("It is red.") == "[PredictAnswer] It is red."


def test_function_margin_sums_the_tokens_that_begin_each_function():
    tops = [("Search", -1.0), ("S", -2.0), ("Predict", -0.5), ("Pred", -3.0), ("Seek", -0.1), ("", -0.2)]
    search = math.log(math.exp(-1.0) + math.exp(-2.0))
    predict = math.log(math.exp(-0.5) + math.exp(-3.0))
    assert function_margin(tops) == pytest.approx(search - predict, abs=1e-12)
    assert function_margin([("Search", -4.0)]) == math.inf
    assert function_margin([("Predict", -4.0), ("Seek", -0.1)]) == -math.inf
    assert function_margin([("Seek", -0.1), ("yes", -1.0)]) is None


@pytest.mark.slow
def test_openai_agent_on_smollm2_acts_as_its_log_probabilities_say(one_torch_thread):
    """On the embedded model " yes"/" no" are among the top tokens (the margin over the whole vocabulary
    decides) and the function tokens differ at a top token: it searches, with the served greedy query."""
    from agile.models import load_causal_lm

    observations = mixed_observations(1)
    with cli_server(["serve", "--model", "smollm2"]) as url:
        remote = OpenAIAgent("smollm2", base_url=f"{url}/v1", concurrency=2).act(observations)
    served = Served(*load_causal_lm("smollm2", device="cpu"))
    assert [a.text for a in remote] == [served.expected(o)[0] for o in observations]
    assert all(served.yes_no_margin(o) is not None for o in observations if yes_no(o))
    assert all(function_margin(served.top(o, "[")) is not None for o in observations if not yes_no(o))
    assert any(a.text.startswith("[SearchProduct]") for a in remote)


def test_collect_through_the_server(model_server, tiny, tmp_path):
    from helper.commands.cli import main
    from trajectories.shards import read_trajectories

    before = completions(model_server)
    out = tmp_path / "traj"
    assert main(["collect", "--agent", "openai:tiny", "--strong", "openai:tiny", "--base-url", f"{model_server}/v1",
                 "--data", str(SLICE), "--memory", "lexical",
                 "--episodes", "3", "--questions-per-episode", "3", "--explore-p", "0", "1", "--budget", "1",
                 "--shard-size", "2", "--out", str(out)], experiments=True) == 0
    frame = read_trajectories(out)  # validated against the schema
    assert frame["episode_id"].n_unique() == 3 and frame.height == 9 and set(frame["env"]) == {"productqa"}
    assert completions(model_server) - before >= frame.height
    # explore_p 1 with budget 1: exactly the first decision of episode 1 goes to the strong actor.
    strong = frame.filter(pl.col("intervened"))
    assert strong["episode_id"].unique().to_list() == [frame["episode_id"].unique(maintain_order=True)[1]]
    assert set(strong["actor"]) == {"strong"} and set(frame.filter(~pl.col("intervened"))["actor"]) == {"base"}
    assert all(text.startswith(("[PredictAnswer]", "[SearchProduct]")) for text in frame["action_text"])
    # The logged state reproduces the action: it is what the model's log-probabilities give on that
    # context (a search question logs the query first). No annotation is needed to replay it.
    served = Served(*tiny)
    for row, features in zip(frame.iter_rows(named=True), number_maps(frame["features"])):
        observation = Observation(row["episode_id"], row["env"], row["task_id"], row["step"], row["state_text"],
                                  row["horizon"], features)
        assert row["action_text"].startswith(served.expected(observation)[0])


def test_openai_agent_plays_textworld(model_server, tmp_path):
    from agile.envs.textworld_env import TextWorldEpisode
    from agile.envs.textworld_games import ensure_game, game_suite
    from agile.rollout import run_episodes

    game = ensure_game(game_suite(1, "train", (3,))[0], tmp_path)
    episode = TextWorldEpisode(game, 0, "tw-0")
    before = httpx.get(f"{model_server}/health").json()["completions"]
    agent = OpenAIAgent("tiny", base_url=f"{model_server}/v1", max_tokens=12)
    (records,) = run_episodes([episode], agent, budget=1, explore_p=0.0)
    assert episode.done and len(records) >= 1
    # One request per decision; the model writes the command (the environment maps or wastes it).
    assert httpx.get(f"{model_server}/health").json()["completions"] - before == len(records)
    assert all(r.actor == "base" and r.action_text.strip() for r in records)


CONTEXT = ("You answer customers' questions about shoes. Reply with one line:\n"
           "[SearchProduct] SELECT product_id FROM `shoes` WHERE ... (to find products)\n"
           "[PredictAnswer] <short answer> (when you know it)\n"
           "Table `shoes` (2 products). Columns:\nproduct_id TEXT -- the product's asin\ntitle TEXT\n"
           "[GetQuestion] {question}\n[RetrieveMemory]\nKnowledge: none\nHistory: none\n")
"""An executor context, as ``agile.executor.executor`` writes it."""


def test_unreachable_server_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    agent = OpenAIAgent("tiny", base_url=url, timeout=2.0, max_retries=1)
    observation = Observation("e", "productqa", "t", 0, CONTEXT.format(question="Is it red?"), 1)
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:\d+/v1.*after 1 retries"):
        agent.act([observation])


def test_retries_with_back_off_then_time_out():
    """The agent's client retries a failing server (503) and gives up on a slow one after its time-out."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app, calls, bodies = FastAPI(), Counter(), []

    @app.post("/v1/chat/completions")
    def flaky(body: dict):
        calls["n"] += 1
        bodies.append(body)
        if any("slow" in m["content"] for m in body["messages"]):
            time.sleep(1.0)
        if calls["n"] <= 2:
            return JSONResponse({"error": {"message": "busy"}}, status_code=503)
        return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": " brown"}}]}

    observation = Observation("e", "productqa", "t", 0, CONTEXT.format(question="What color is it?"), 1)
    with thread_server(app) as url:
        with pytest.raises(RuntimeError, match="HTTP 503 busy"):
            OpenAIAgent("m", base_url=f"{url}/v1", max_retries=1).act([observation])
        assert calls["n"] == 2  # the first try and one retry
        calls.clear()
        bodies.clear()
        started = time.monotonic()
        assert OpenAIAgent("m", base_url=f"{url}/v1", max_retries=2).act([observation])[0].text == "[PredictAnswer] brown"
        # The model decides whether to search first (one request, tried three times: two 503s, then
        # a reply), then answers (one request): two waits of the back-off in all.
        assert calls["n"] == 4 and time.monotonic() - started >= 0.5
        # The context is the user message; the reply is started by "[" to decide (" brown" is no
        # function token: an answer), then by the function token, continued by the server.
        user = {"role": "user", "content": observation.state_text}
        assert [b["messages"] for b in bodies[2:]] == [[user, {"role": "assistant", "content": "["}],
                                                       [user, {"role": "assistant", "content": "[PredictAnswer]"}]]
        assert all(b["continue_final_message"] and not b["add_generation_prompt"] for b in bodies)
        assert bodies[2]["top_logprobs"] == 20 and bodies[2]["max_tokens"] == 1 and bodies[3]["stop"] == ["\n"]
        slow = Observation("e", "productqa", "t", 0, CONTEXT.format(question="What is slow?"), 1)
        with pytest.raises(ConnectionError, match=r"127\.0\.0\.1.*timed out"):
            OpenAIAgent("m", base_url=f"{url}/v1", timeout=0.3, max_retries=0).act([slow])


def test_remote_endpoint_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIAgent("gpt-4o-mini")


# -- helpgate serve-gate -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def helper_dirs(tmp_path_factory):
    """Two helper folders: one that reads the question type, one whose threshold 0 wants every decision."""
    import numpy as np

    from helper.gates.features import FeatureClassifier, frame_features
    from helper.gates.helper_gate import HelperGate

    rng = np.random.default_rng(0)
    hard = rng.random(300) < 0.4
    frame = pl.DataFrame({"step": np.arange(300) % 6, "horizon": [6] * 300, "budget_left": rng.integers(1, 3, 300),
                          "features": [f'{{"type_reasoning_qa": {float(h)}}}' for h in hard]})
    names = ["step", "progress", "budget_left", "budget_per_step", "f_type_reasoning_qa"]
    fallback = FeatureClassifier("logreg", names).fit(frame_features(frame, names), hard.astype(int))
    # No PRM: every decision takes the fallback classifier, which reads the question type.
    reads, always = tmp_path_factory.mktemp("helper"), tmp_path_factory.mktemp("always")
    trained = {"horizon": 6}  # what the server takes its horizon from
    HelperGate("features", fallback, fallback, solved_budget=2, trained_on=trained).save(reads)
    HelperGate("features", fallback, fallback, solved_budget=2, threshold=0.0, trained_on=trained).save(always)
    return reads, always


def test_serve_gate_never_grants_more_than_the_budget_under_16_clients(helper_dirs):
    budget, clients, episodes, horizon = 3, 16, 40, 6
    with cli_server(["serve-gate", "--helper", str(helper_dirs[1]), "--budget", str(budget)]) as url:
        def client(c: int) -> dict:
            answers = {}
            with httpx.Client(base_url=url, timeout=30) as http:  # one keep-alive connection per client
                # Every client asks every (episode, step), each in its own order: the steps of an episode
                # race each other (the count must hold against concurrency), and each decision point is
                # asked 16 times at once (a retry storm: every repeat must get the first answer).
                order = [(e, s) for e in range(episodes) for s in range(horizon)]
                order = order[c * 13 % len(order):] + order[:c * 13 % len(order)]
                for e, s in order if c % 2 else reversed(order):
                    answer = http.post("/v1/gate", json={"episode_id": f"ep-{e}", "step": s, "state_text": "s",
                                                         "features": {"type_reasoning_qa": 1.0}})
                    assert answer.status_code == 200, answer.text
                    answers[e, s] = answer.json()
                    assert 0 <= answers[e, s]["budget_left"] <= budget
            return answers

        with ThreadPoolExecutor(clients) as pool:
            every = list(pool.map(client, range(clients)))
        # Each decision point was answered once: the 16 clients got the same answer for it.
        assert all(answers == every[0] for answers in every[1:])
        totals = Counter()
        for (e, _), answer in every[0].items():
            totals[f"ep-{e}"] += answer["intervene"]
        # The gate wants every decision: each episode gets exactly its budget, never more.
        assert sum(totals.values()) == budget * episodes and set(totals.values()) == {budget}
        assert httpx.post(f"{url}/v1/episodes/ep-0/end").json() == {"episode_id": "ep-0", "used": budget}
        # A freed id starts a new episode with the whole budget.
        again = httpx.post(f"{url}/v1/gate", json={"episode_id": "ep-0", "step": 0, "state_text": "s",
                                                   "features": {"type_reasoning_qa": 0.0}}).json()
        assert again["intervene"] and again["budget_left"] == budget - 1


class AlwaysWants(BudgetedGate):
    def wants(self, observation, budget_left):
        return True


def test_served_gate_holds_the_only_budget():
    """The wrapped gate's own count is never spent: the server's budget is the one that counts."""
    inner = AlwaysWants(budget=1)
    gate = ServedGate(inner, budget=2)
    observation = Observation("e", "env", "t", 0, "s", 4)
    steps = [dataclasses.replace(observation, step=step) for step in range(3)]
    assert [gate.decide(o) for o in steps] == [(True, 1, 1.0), (True, 0, 1.0), (False, 0, None)]
    assert gate.decide(observation) == (True, 1, 1.0) and gate.used("e") == 2  # a repeat: the first answer, free
    assert inner.used("e") == 0
    with pytest.raises(ValueError, match="--budget"):
        ServedGate(AlwaysWants())

    class EvenSteps:  # a bare agile.protocol.Gate
        def should_intervene(self, observation, budget_left):
            return observation.step % 2 == 0

    gate = ServedGate(EvenSteps(), budget=1)
    decisions = [gate.decide(Observation("f", "env", "t", step, "s", 4))[0] for step in range(4)]
    assert decisions == [True, False, False, False]


def test_serve_gate_command_serves_a_helper_folder(helper_dirs):
    args = ["serve-gate", "--helper", str(helper_dirs[0]), "--budget", "1", "--horizon", "6"]
    with cli_server(args) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/health").json()["budget"] == 1
        hard = {"episode_id": "e1", "step": 0, "state_text": "Customer: Does it fit?",
                "features": {"type_reasoning_qa": 1.0}, "proposal": "[PredictAnswer] yes"}
        first = http.post("/v1/gate", json=hard).json()
        assert first["intervene"] and first["budget_left"] == 0 and first["score"] >= 0.5
        # Budget spent: no decision is made, and no score.
        assert http.post("/v1/gate", json=hard | {"step": 1}).json() == {"intervene": False, "budget_left": 0,
                                                                        "score": None, "horizon": 6}
        easy = http.post("/v1/gate", json=hard | {"episode_id": "e2", "features": {"type_reasoning_qa": 0.0}})
        assert easy.json()["intervene"] is False and easy.json()["score"] < 0.5
        assert http.post("/v1/episodes/e1/actions", json={"step": 0, "action_text": "x"}).status_code == 200
        assert http.post("/v1/episodes/e1/end").json() == {"episode_id": "e1", "used": 1}
        missing = http.post("/v1/episodes/e1/end")
        assert missing.status_code == 404 and "not open" in missing.json()["detail"]
        bad = http.post("/v1/gate", json={"episode_id": "e3", "step": -1, "state_text": "s"})
        assert bad.status_code == 422 and "step" in bad.text
        late = http.post("/v1/gate", json={"episode_id": "e3", "step": 6, "state_text": "s",
                                           "features": {"type_reasoning_qa": 0.0}})
        assert late.status_code == 422 and "horizon" in late.text
        assert math.isclose(http.post("/v1/gate", json=hard | {"episode_id": "e1"}).json()["score"],
                            first["score"])
