"""A local OpenAI-compatible server for the agent tests: ``POST /v1/chat/completions`` answers
with scripted assistant turns (tool calls or text, optionally slow or failing) and records every
request, on 127.0.0.1 (built on tests/support/local_http.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.local_http import LocalServer, Reply, Seen, local_server

PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class StubTurn:
    """One answer: ``tool_calls`` as (id, name, arguments JSON text) or ``content``."""

    content: str | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    delay_s: float = 0.0
    status: int = 200
    prompt_tokens: int = 100
    completion_tokens: int = 20


def tool_call(call_id: str, name: str, **args: Any) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args))


@dataclass
class ChatStub:
    """Answers requests with ``turns`` in order; past the end, the last turn again."""

    turns: list[StubTurn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(json.loads(seen.body))
            self.headers.append(seen.headers)
            n = len(self.requests) - 1
        turn = self.turns[min(n, len(self.turns) - 1)]
        if turn.status != 200:
            body = {"error": {"message": "the stub is failing", "type": "server_error"}}
            return Reply(turn.status, json.dumps(body).encode(), _JSON, turn.delay_s)
        return Reply(200, json.dumps(completion(turn, n)).encode(), _JSON, turn.delay_s)


_JSON = {"Content-Type": "application/json"}


def completion(turn: StubTurn, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in turn.tool_calls]
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1700000000,
            "model": "stub-model",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
            "usage": {"prompt_tokens": turn.prompt_tokens,
                      "completion_tokens": turn.completion_tokens,
                      "total_tokens": turn.prompt_tokens + turn.completion_tokens}}


@contextmanager
def chat_stub(turns: list[StubTurn]) -> Iterator[tuple[ChatStub, LocalServer]]:
    stub = ChatStub(turns)
    with local_server({PATH: stub}) as server:
        yield stub, server


EMBEDDINGS_PATH = "/v1/embeddings"


@dataclass
class EmbeddingsStub:
    """``POST /v1/embeddings``: each input's vector from ``embed`` (scaled by 3, so a client
    must normalize it), in reverse order with its ``index`` (so a client must sort); ``failing``
    answers 503 to everything. Records every request."""

    embed: Any  # Callable[[list[str]], list[list[float]]]
    failing: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, seen: Seen) -> Reply:
        request = json.loads(seen.body)
        self.requests.append(request)
        if self.failing:
            return Reply(503, b'{"error": {"message": "overloaded"}}', _JSON)
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        data = [{"object": "embedding", "index": n, "embedding": [3 * x for x in vector]}
                for n, vector in enumerate(self.embed(texts))]
        body = {"object": "list", "data": data[::-1], "model": request["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        return Reply(200, json.dumps(body).encode(), _JSON)


@contextmanager
def embeddings_stub(embed: Any) -> Iterator[tuple[EmbeddingsStub, LocalServer]]:
    stub = EmbeddingsStub(embed)
    with local_server({EMBEDDINGS_PATH: stub}) as server:
        yield stub, server
