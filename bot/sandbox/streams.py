"""Slack's chat streaming as the sandbox plays it (``chat.startStream``, ``chat.appendStream``,
``chat.stopStream``): a streamed message is kept as its chunks say (the plan's title, each task
by id, the markdown streamed) and drawn as Slack draws a ``plan`` display: one ``plan`` block
with its tasks, then the text, then the blocks ``chat.stopStream`` adds at the bottom."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.sandbox.workspace import SlackError

STATUSES = ("pending", "in_progress", "complete", "error")
CHUNK_TEXT = 256  # a streamed title, details or output (Slack's SDKs' note)


def checked_chunks(chunks: Any) -> list[dict[str, Any]]:
    """``chunks`` when Slack would take them, else ``invalid_chunks``."""
    if chunks is None:
        return []
    if not isinstance(chunks, list):
        raise SlackError("invalid_chunks")
    for chunk in chunks:
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        if kind == "plan_update":
            fine = 0 < len(str(chunk.get("title") or "")) <= CHUNK_TEXT
        elif kind == "task_update":
            fine = bool(chunk.get("id")) and bool(chunk.get("title")) and \
                chunk.get("status") in STATUSES and all(
                    len(str(chunk.get(name) or "")) <= CHUNK_TEXT
                    for name in ("title", "details", "output"))
        else:
            fine = kind == "markdown_text" and bool(chunk.get("text"))
        if not fine:
            raise SlackError("invalid_chunks")
    return list(chunks)


@dataclass
class Stream:
    """One streamed message: ``recipient`` is whom Slack streams it to."""

    ts: str
    recipient: str | None
    title: str = ""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    text: str = ""
    bottom: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    def apply(self, chunks: list[dict[str, Any]]) -> None:
        for chunk in chunks:
            if chunk["type"] == "plan_update":
                self.title = str(chunk["title"])
            elif chunk["type"] == "markdown_text":
                self.text += str(chunk["text"])
            else:
                task: dict[str, Any] = {"task_id": chunk["id"], "title": chunk["title"],
                                        "status": chunk["status"]}
                for name in ("details", "output"):
                    if chunk.get(name):
                        task[name] = {"type": "rich_text", "elements": [{
                            "type": "rich_text_section",
                            "elements": [{"type": "text", "text": str(chunk[name])}]}]}
                if chunk.get("sources"):
                    task["sources"] = list(chunk["sources"])
                self.tasks[str(chunk["id"])] = task

    def blocks(self) -> list[dict[str, Any]]:
        drawn: list[dict[str, Any]] = []
        if self.tasks or self.title:
            drawn.append({"type": "plan", "block_id": f"stream-{self.ts}",
                          "title": self.title or "Plan", "tasks": list(self.tasks.values())})
        if self.text:
            drawn.append({"type": "markdown", "text": self.text})
        return [*drawn, *self.bottom]

    def fallback(self) -> str:
        done = sum(t["status"] in ("complete", "error") for t in self.tasks.values())
        return f"{self.title or 'Plan'}: {done} of {len(self.tasks)} done"
