"""An OpenAI-compatible chat-completions server over a Hugging Face causal LM.

    helpgate serve --model smollm2 --port 8000          # or tiny, a Hugging Face id, a folder
    helpgate collect --agent openai:smollm2 --base-url http://127.0.0.1:8000/v1 --out traj

It serves the subset of the API that the agents use, so any OpenAI client (and the
``openai:MODEL`` agents of ``agile.agents.openai_agent``) can talk to a local model:

- ``POST /v1/chat/completions``: ``messages``, ``max_tokens`` (or ``max_completion_tokens``),
  ``temperature`` (0: greedy), ``top_p``, ``n``, ``stop``, ``seed``, ``logprobs`` /
  ``top_logprobs`` (log-probabilities of the model's own distribution, before temperature);
  ``stream`` is refused. As in vLLM, ``continue_final_message: true`` (with
  ``add_generation_prompt: false``) continues a last ``assistant`` message instead of starting
  a new turn: the agents use it to give the start of the reply (a function token).
- ``GET /v1/models``, and ``GET /health`` (the served name and the completions answered).

Text that is not UTF-8 (a lone surrogate such as ``"\\ud800"``, valid JSON that no tokenizer can
encode) is a 400 naming the field. The prompt is the tokenizer's chat template. Requests are
answered one at a time under a lock (one model, one forward at a time: on a CPU a batch brings no
speed-up per token); the server listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from helper.serve.guard import utf8_text


@dataclass
class ServeConfig:
    """Serve a causal LM behind OpenAI-compatible chat completions."""

    model: str = "smollm2"
    """Model to serve: smollm2 (embedded), tiny (random-initialised, for tests), a Hugging Face id or a folder."""
    served_name: str | None = None
    """Model name clients must send (default: the --model value)."""
    host: str = "127.0.0.1"
    """Interface to listen on (0.0.0.0 exposes the server to the network)."""
    port: int = 8000
    """TCP port to listen on."""
    device: str | None = None
    """Torch device (default: cuda when available, else cpu)."""
    seed: int = 0
    """Seed of the tiny model's random weights."""
    max_tokens: int = 256
    """Largest max_tokens a request may ask for, and the limit of a request that gives none."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "warning"
    """uvicorn's log level."""


class Message(BaseModel):
    """One chat turn (text only)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[dict]

    @field_validator("content")
    @classmethod
    def _utf8(cls, content):
        # A lone surrogate passes JSON and pydantic but no tokenizer: a 400 naming the field, not a 500.
        for text in [content] if isinstance(content, str) else [p.get("text") for p in content]:
            if isinstance(text, str):
                utf8_text(text)
        return content

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = [p.get("text", "") for p in self.content if p.get("type") == "text"]
        if len(parts) != len(self.content):
            raise ValueError("only text content parts are supported")
        return "".join(parts)


class ChatRequest(BaseModel):
    """The request body of /v1/chat/completions (the fields this server reads; others are ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    seed: int | None = None

    @field_validator("stop")
    @classmethod
    def _utf8_stop(cls, stop):
        for text in [stop] if isinstance(stop, str) else stop or []:
            utf8_text(text)
        return stop
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    stream: bool = False
    continue_final_message: bool = False
    add_generation_prompt: bool = True


class ModelServer:
    """The model, its tokenizer and the generation lock; ``complete`` answers one request body."""

    def __init__(self, model, tokenizer, name: str, max_tokens: int = 256):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_tokens = int(max_tokens)
        self.completions = 0
        """Chat completions answered so far (shown by /health)."""
        self._lock = threading.Lock()

    def render(self, messages: list[dict], continue_final: bool, generation_prompt: bool) -> str:
        if continue_final and (not messages or messages[-1]["role"] != "assistant"):
            raise ValueError("continue_final_message needs a last message with role 'assistant'.")
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, continue_final_message=continue_final,
                add_generation_prompt=generation_prompt and not continue_final)
        # A base model without a chat template: plain text turns, as the local agents do.
        turns = [m["content"] for m in (messages[:-1] if continue_final else messages)]
        text = "\n\n".join(turns) + "\n\nReply: "
        return text + (messages[-1]["content"] if continue_final else "")

    def complete(self, body: ChatRequest) -> dict:
        import torch

        limit = body.max_completion_tokens or body.max_tokens or self.max_tokens
        if limit > self.max_tokens:
            raise ValueError(f"max_tokens={limit}: this server allows at most {self.max_tokens} (--max-tokens).")
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        prompt = self.render(messages, body.continue_final_message, body.add_generation_prompt)
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        ids = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        context = getattr(self.model.config, "max_position_embeddings", None)
        if context and ids.shape[1] + limit > context:
            raise ValueError(f"the prompt has {ids.shape[1]} tokens and max_tokens={limit}: more than the model's "
                             f"context of {context} tokens. Shorten the messages or ask for fewer tokens.")
        choices = []
        completion_tokens = 0
        with self._lock, torch.no_grad():
            for index in range(body.n):
                tokens, steps = self._generate(ids.to(self.model.device), limit, body, stops, index)
                choice = self._choice(tokens, steps, limit, stops, body)
                choice["index"] = index
                completion_tokens += len(tokens)
                choices.append(choice)
            self.completions += 1
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.name, "choices": choices,
            "usage": {"prompt_tokens": int(ids.shape[1]), "completion_tokens": completion_tokens,
                      "total_tokens": int(ids.shape[1]) * body.n + completion_tokens},
        }

    def _generate(self, ids, limit: int, body: ChatRequest, stops: list[str], index: int):
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        tokenizer, start = self.tokenizer, ids.shape[1]

        class StopStrings(StoppingCriteria):
            # Decoding a few dozen new tokens per step is cheap next to a forward pass.
            def __call__(self, input_ids, scores, **kwargs):
                text = tokenizer.decode(input_ids[0, start:], skip_special_tokens=True)
                return torch.tensor([any(s in text for s in stops)], device=input_ids.device)

        kwargs = {"max_new_tokens": limit, "pad_token_id": tokenizer.pad_token_id,
                  "return_dict_in_generate": True, "output_logits": True,
                  "attention_mask": torch.ones_like(ids)}
        if stops:
            kwargs["stopping_criteria"] = StoppingCriteriaList([StopStrings()])
        if body.temperature > 0:
            if body.seed is not None:
                torch.manual_seed(body.seed + index)
            kwargs.update(do_sample=True, temperature=body.temperature, top_p=body.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        out = self.model.generate(ids, **kwargs)
        return out.sequences[0, start:].tolist(), [logits[0].float() for logits in out.logits]

    def _choice(self, tokens: list[int], step_logits, limit: int, stops: list[str], body: ChatRequest) -> dict:
        import torch

        tokenizer = self.tokenizer
        eos = {tokenizer.eos_token_id} | set(_as_list(getattr(self.model.generation_config, "eos_token_id", None)))
        ended = bool(tokens) and tokens[-1] in eos
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        cut = min((text.find(s) for s in stops if s in text), default=-1)
        finish = "stop" if ended or cut >= 0 else ("length" if len(tokens) >= limit else "stop")
        if cut >= 0:
            text = text[:cut]
        choice = {"message": {"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": None}
        if body.logprobs:
            entries, shown = [], ""
            for token, logits in zip(tokens, step_logits):
                if token in eos or (cut >= 0 and len(shown) >= cut):
                    break  # what the reply text does not show has no log-probability entry
                log_probs = torch.log_softmax(logits, dim=-1)
                piece = tokenizer.decode([token])
                shown += piece
                entry = _logprob_entry(piece, float(log_probs[token]))
                top = torch.topk(log_probs, body.top_logprobs or 0) if body.top_logprobs else None
                entry["top_logprobs"] = [] if top is None else [
                    _logprob_entry(tokenizer.decode([i]), float(v)) for v, i in zip(top.values, top.indices.tolist())]
                entries.append(entry)
            choice["logprobs"] = {"content": entries}
        return choice


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _logprob_entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def create_app(server: ModelServer):
    """The FastAPI application of one loaded model."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app = FastAPI(title="helpgate model server")

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        # The OpenAI error shape: clients show error.message.
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.exception_handler(RequestValidationError)
    def invalid(request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return error(400, f"invalid request: {problems}")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "model": server.name, "completions": server.completions}

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": server.name, "object": "model", "owned_by": "helpgate"}]}

    @app.post("/v1/chat/completions")
    def chat_completions(body: ChatRequest):  # a plain def: FastAPI runs it in a worker thread
        if body.model != server.name:
            return error(404, f"model {body.model!r} is not served here; this server serves {server.name!r}.",
                         "model_not_found")
        if body.stream:
            return error(400, "stream=true is not supported by this server; send stream=false.")
        if body.logprobs is False and body.top_logprobs:
            return error(400, "top_logprobs needs logprobs=true.")
        try:
            return server.complete(body)
        except ValueError as exc:
            return error(400, str(exc))

    return app


def load(config: ServeConfig) -> ModelServer:
    from agile.models import load_causal_lm

    model, tokenizer = load_causal_lm(config.model, device=config.device, seed=config.seed)
    return ModelServer(model, tokenizer, config.served_name or config.model, config.max_tokens)


def run(config: ServeConfig) -> None:
    """Load the model and serve it until interrupted."""
    import uvicorn

    if not 0 < config.port < 65536:
        raise ValueError(f"port={config.port}: choose a TCP port in 1..65535.")
    server = load(config)
    print(f"serving {server.name!r} on http://{config.host}:{config.port}/v1", flush=True)
    uvicorn.run(create_app(server), host=config.host, port=config.port, log_level=config.log_level)
