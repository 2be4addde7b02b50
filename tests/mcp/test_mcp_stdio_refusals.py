"""``opsgate mcp`` over stdio answers every request it refuses (issue 40): a request nested 1,000
deep (past the SDK's JSON parser), one nested deeper than ``/mcp`` accepts, and a line that is not
JSON each get a JSON-RPC error carrying the request's id, and the server goes on serving. Spoken
line by line to a real subprocess, every read bounded."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from typing import Any

from sqlalchemy import Engine

from core.strict_json import MAX_DEPTH
from tests.support.mcp_clients import REPO
from tests.support.metrics import STAND_IN_ENV
from tests.support.processes import clean_env

ANSWER_S = 30.0


def nested(request_id: int, depth: int) -> str:
    """A ``tools/call`` whose arguments hold a list nested ``depth`` deep."""
    return (f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": '
            f'{{"name": "list_cases", "arguments": {{"deep": {"[" * depth}{"]" * depth}}}}}}}')


class Stdio:
    """``python -m core.cli mcp`` with its stdin and stdout as pipes, read by a thread."""

    def __init__(self, engine: Engine) -> None:
        url = engine.url.render_as_string(hide_password=False)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "core.cli", "mcp", "--database-url", url], cwd=REPO,
            env=clean_env(**STAND_IN_ENV), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def ask(self, line: str) -> dict[str, Any]:
        """Send one line; the next line the server writes, as JSON (fails after ANSWER_S)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        try:
            return dict(json.loads(self.lines.get(timeout=ANSWER_S)))
        except queue.Empty:
            raise AssertionError(f"no answer within {ANSWER_S:g}s to {line[:80]}") from None

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def test_every_refused_request_is_answered_with_its_id(sqlite_engine: Engine) -> None:
    server = Stdio(sqlite_engine)
    try:
        unreadable = server.ask(nested(7, 1000))
        too_deep = server.ask(nested(8, MAX_DEPTH + 10))
        not_json = server.ask('{"jsonrpc": "2.0", "id": "x-9", "method": ')
        init = server.ask(json.dumps({
            "jsonrpc": "2.0", "id": 10, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}}))
    finally:
        server.close()

    assert unreadable["id"] == 7 and unreadable["error"]["code"] == -32700
    assert unreadable["error"]["message"].startswith("refused, nothing ran: Invalid JSON")
    assert too_deep["id"] == 8 and too_deep["error"] == {
        "code": -32600, "message": f"refused, nothing ran: the request is nested deeper than "
                                   f"{MAX_DEPTH} levels of arrays and objects"}
    assert not_json["id"] == "x-9" and not_json["error"]["code"] == -32700
    assert init["id"] == 10 and "result" in init  # and it goes on serving
