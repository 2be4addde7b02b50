"""Slack's plan and task card blocks and its chat streaming, as the fake Web API plays them.

The rules are docs.slack.dev's: a ``plan`` block has a ``title`` and ``tasks``; a task (a task
card's fields) has a ``task_id`` and a ``title``, a ``status`` among pending, in_progress,
complete and error, ``details`` and ``output`` each one ``rich_text`` object, ``sources`` URL
source elements (``type`` url, ``url``, ``text``, all required). Streamed chunks
(``chat.startStream`` / ``appendStream`` / ``stopStream``): ``plan_update`` with a ``title``,
``task_update`` with ``id``, ``title`` and ``status``, its ``details`` and ``output`` strings.
Limits the reference pages leave out come from Slack's SDKs' notes (and are marked so): 256
characters for a streamed title, details or output; 50 tasks in a plan, each ``task_id``
once; a plan and task cards not in the same message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUSES = ("pending", "in_progress", "complete", "error")
CHUNK_TEXT = 256  # SDK note: a streamed chunk's title, details and output
MAX_TASKS = 50  # SDK note: a plan's tasks
MARKDOWN_TEXT = 12000  # chat.*Stream: markdown_text


def plan_problems(block: dict[str, Any]) -> list[tuple[str, str]]:
    """A ``plan`` block's refusals, each with its JSON pointer inside the block."""
    found: list[tuple[str, str]] = []
    title = block.get("title")
    if not isinstance(title, str) or not 0 < len(title) <= CHUNK_TEXT:
        found.append((f"must be a string of 1 to {CHUNK_TEXT} characters", "/title"))
    tasks = block.get("tasks", [])
    if not isinstance(tasks, list):
        return [*found, ("must be an array", "/tasks")]
    if len(tasks) > MAX_TASKS:
        found.append((f"must provide at most {MAX_TASKS} items", "/tasks"))
    seen: set[str] = set()
    for n, task in enumerate(tasks):
        if isinstance(task, dict) and task.get("type", "task_card") != "task_card":
            found.append(("must be a task card", f"/tasks/{n}/type"))
        found += [(problem, f"/tasks/{n}{at}") for problem, at in task_problems(task)]
        if isinstance(task, dict) and task.get("task_id") in seen:
            found.append(("must be unique in the plan", f"/tasks/{n}/task_id"))
        if isinstance(task, dict):
            seen.add(str(task.get("task_id")))
    return found


def task_problems(task: Any) -> list[tuple[str, str]]:
    """A task card's (or a plan's task's) refusals."""
    if not isinstance(task, dict):
        return [("must be an object", "")]
    found: list[tuple[str, str]] = []
    for name in ("task_id", "title"):
        if not isinstance(task.get(name), str) or not task[name]:
            found.append(("must be a non-empty string", f"/{name}"))
    if "status" in task and task["status"] not in STATUSES:
        found.append((f"must be one of {', '.join(STATUSES)}", "/status"))
    for name in ("details", "output"):
        if name in task and not _rich_text(task[name]):
            found.append(("must be a single rich_text object", f"/{name}"))
    found += _sources_problems(task.get("sources"))
    return found


def _rich_text(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "rich_text" and \
        isinstance(value.get("elements"), list) and bool(value["elements"])


def _sources_problems(sources: Any) -> list[tuple[str, str]]:
    if sources is None:
        return []
    if not isinstance(sources, list):
        return [("must be an array", "/sources")]
    found = []
    for n, source in enumerate(sources):
        if not isinstance(source, dict) or source.get("type") != "url" or \
                not str(source.get("url", "")).startswith(("http://", "https://")) or \
                not source.get("text"):
            found.append(("must be a url source element (type url, url, text)",
                          f"/sources/{n}"))
    return found


def chunk_problems(chunks: Any) -> list[str]:
    """What Slack would refuse in a streaming call's ``chunks``."""
    if chunks is None:
        return []
    if not isinstance(chunks, list):
        return ["must be an array [json-pointer:/chunks]"]
    found: list[str] = []
    for n, chunk in enumerate(chunks):
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        where = f"[json-pointer:/chunks/{n}"
        if kind == "plan_update":
            if not isinstance(chunk.get("title"), str) or \
                    not 0 < len(chunk["title"]) <= CHUNK_TEXT:
                found.append(f"must be 1 to {CHUNK_TEXT} characters {where}/title]")
        elif kind == "task_update":
            for name in ("id", "title"):
                if not isinstance(chunk.get(name), str) or not chunk[name]:
                    found.append(f"must be a non-empty string {where}/{name}]")
            if chunk.get("status") not in STATUSES:
                found.append(f"must be one of {', '.join(STATUSES)} {where}/status]")
            for name in ("title", "details", "output"):
                if len(str(chunk.get(name) or "")) > CHUNK_TEXT:
                    found.append(f"must be at most {CHUNK_TEXT} characters {where}/{name}]")
            found += [f"{problem} {where}{at}]"
                      for problem, at in _sources_problems(chunk.get("sources"))]
        elif kind == "markdown_text":
            if not 0 < len(str(chunk.get("text") or "")) <= MARKDOWN_TEXT:
                found.append(f"must be 1 to {MARKDOWN_TEXT} characters {where}/text]")
        else:
            found.append(f"must be a known chunk type {where}/type]")
    return found


@dataclass
class Stream:
    """One streamed message as Slack keeps it: the plan's title, its tasks by id in the order
    they came, the text streamed, and the blocks ``chat.stopStream`` put at the bottom."""

    ts: str
    channel: str
    thread_ts: str
    recipient: str | None
    title: str = ""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    text: str = ""
    bottom: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    def apply(self, chunks: list[dict[str, Any]] | None) -> None:
        for chunk in chunks or ():
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
                            "elements": [{"type": "text", "text": chunk[name]}]}]}
                if chunk.get("sources"):
                    task["sources"] = chunk["sources"]
                self.tasks[str(chunk["id"])] = task

    def blocks(self) -> list[dict[str, Any]]:
        """The message as Slack draws it (``task_display_mode`` plan): one plan block."""
        shown: list[dict[str, Any]] = []
        if self.tasks or self.title:
            shown.append({"type": "plan", "title": self.title or "Plan",
                          "tasks": list(self.tasks.values())})
        if self.text:
            shown.append({"type": "markdown", "text": self.text})
        return [*shown, *self.bottom]
