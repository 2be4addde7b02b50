"""A local MCP server written with the SDK, standing for a team's ticket desk: a read-only tool
(``lookup_ticket``) and one that changes things (``restart_worker``). Every call it receives is
appended to a JSON-lines log (tool, arguments, ``_meta``), so a test counts what really ran.

    python -m tests.support.ticket_desk LOG         # over stdio
    with desk_over_http(log) as url: ...         # over streamable HTTP, in a thread
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from tests.support.mcp_clients import REPO
from tests.support.peers import free_port, poll


def desk(log: Path) -> MCPServer:
    server = MCPServer("ticket-desk")

    def record(tool: str, arguments: dict[str, Any], ctx: Context) -> None:
        meta = dict(ctx.request_context.meta or {})
        line = json.dumps({"tool": tool, "arguments": arguments,
                           "idempotency_key": meta.get("idempotencyKey")})
        with log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup_ticket(ticket: str, ctx: Context) -> dict[str, Any]:
        """The ticket's status and its last comment."""
        record("lookup_ticket", {"ticket": ticket}, ctx)
        return {"ticket": ticket, "status": "open", "last_comment": "workers w1, w2 stuck"}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def restart_worker(worker: str, ctx: Context) -> dict[str, Any]:
        """Restart one queue worker."""
        record("restart_worker", {"worker": worker}, ctx)
        return {"worker": worker, "restarted": True}

    return server


def calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """What the desk received, oldest first (only ``tool``'s calls when given)."""
    if not log.exists():
        return []
    received = [json.loads(line) for line in log.read_text("utf-8").splitlines()]
    return [c for c in received if tool is None or c["tool"] == tool]


@contextmanager
def desk_over_http(log: Path) -> Iterator[str]:
    """The desk on streamable HTTP on a free port of 127.0.0.1; yields its /mcp URL."""
    import uvicorn

    port = free_port()
    app = desk(log).streamable_http_app(json_response=True, stateless_http=True)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, name="ticket-desk", daemon=True)
    thread.start()
    try:
        poll(lambda: server.started, 10, "the ticket desk starts", interval_s=0.02)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(10)


if __name__ == "__main__":
    desk(Path(sys.argv[1])).run()


READ, WRITE = "mcp__desk__lookup_ticket", "mcp__desk__restart_worker"


def desk_config(tmp_path: Path, log: Path, **entry: Any) -> Path:
    """OPSGATE_MCP_SERVERS naming the desk over stdio (or ``entry``'s url)."""
    where = entry or {"command": sys.executable, "cwd": str(REPO),
                      "args": ["-m", "tests.support.ticket_desk", str(log)]}
    path = tmp_path / "mcp-servers.json"
    path.write_text(json.dumps({"servers": {"desk": {
        **where, "agent_tools": ["lookup_ticket", "restart_worker"],
        "plan_tools": ["restart_worker"], "timeout_s": 60}}}))
    return path
