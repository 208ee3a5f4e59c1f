"""What the two servers refuse before a request reaches a model: bodies over a size limit, and text
that is not UTF-8.

``BodyLimit`` wraps an ASGI application. A request whose ``Content-Length`` exceeds the limit is
answered 413 before its body is read; a request without one (chunked) is read up to the limit and
answered 413 as soon as it passes it. Neither is parsed nor held in memory past the limit. The
rest of the body is left to the server: uvicorn drops the bytes of a request it has already
answered, below the application, so a client such as ``httpx`` that writes its whole body before
reading the reply still gets the 413 rather than a reset connection. A body declared larger than
``CLOSE_FACTOR`` times the limit is answered with ``Connection: close`` instead: its sender is cut
off rather than read for nothing.

``utf8_text`` is the check for a text field: JSON may carry a lone surrogate (``"\\ud800"``) that
Python accepts in a ``str`` but no tokenizer can encode; refused as a validation error naming the
field rather than failing deep inside a model (an HTTP 500).
"""

from __future__ import annotations

import json

DEFAULT_MAX_BODY = 1 << 20
CLOSE_FACTOR = 16


def utf8_text(value: str) -> str:
    """``value`` unchanged, or ``ValueError`` when it holds a lone surrogate."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"not valid UTF-8 text (a lone surrogate at position {error.start}); send the text "
                         "encoded as UTF-8") from None
    return value


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes (see the module docstring)."""

    def __init__(self, app, limit: int = DEFAULT_MAX_BODY, error_body=None):
        if limit < 1:
            raise ValueError(f"max_body_bytes={limit}: must be at least 1.")
        self.app, self.limit = app, int(limit)
        # The server's own error shape: FastAPI's {"detail"} by default, OpenAI's {"error"} for `serve`.
        self.error_body = error_body or (lambda message: {"detail": message})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            return await self._too_large(send, declared, close=declared > self.limit * CLOSE_FACTOR)
        chunks, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to answer
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            more = message.get("more_body", False)
            if seen > self.limit:
                return await self._too_large(send, None, close=False)
            chunks.append(chunk)
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, as the server reports it

        return await self.app(scope, replay, send)

    async def _too_large(self, send, declared: int | None, close: bool) -> None:
        size = f"{declared} bytes" if declared is not None else f"more than {self.limit} bytes"
        message = (f"request body of {size} is over this server's limit of {self.limit} bytes "
                   "(--max-body-bytes); send less text.")
        payload = json.dumps(self.error_body(message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
