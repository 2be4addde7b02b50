"""What a plan step touches, in words: the target a person checks when nobody knows whether the
step took effect (its outcome arrived after its lease, or an earlier run may have happened)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

TARGET_LIMIT = 160  # characters of a target's words; longer ones end with "…" between words


def _deployment(p: Mapping[str, Any]) -> str:
    return f"deployment {p.get('deployment')} in namespace {p.get('namespace')}"


def _script(p: Mapping[str, Any]) -> str:
    argv = p.get("argv")
    command = shlex.join(str(arg) for arg in argv) if isinstance(argv, list) else str(argv)
    return f"what the command {command} changes"


def _url(p: Mapping[str, Any]) -> str:
    parts = urlsplit(str(p.get("url") or ""))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host  # never credentials
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    return f"the service behind {p.get('method', 'a request to')} {url}"


def _route(p: Mapping[str, Any]) -> str:
    return f"route {p.get('route')} (flipped to {p.get('to')})"


def _scale(p: Mapping[str, Any]) -> str:
    return f"the replicas of deployment {p.get('deployment')} in namespace {p.get('namespace')}"


def _configmap(p: Mapping[str, Any]) -> str:
    return f"configmap {p.get('name')} in namespace {p.get('namespace')}"


def _flag(p: Mapping[str, Any]) -> str:
    return (f"flag {p.get('flag')} of FeatureFlag {p.get('name')} in namespace "
            f"{p.get('namespace')}")


def _mcp(p: Mapping[str, Any]) -> str:
    return f"what tool {p.get('tool')} of MCP server {p.get('server')} changes"


_TARGETS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "k8s.rollout": _deployment,
    "script.exec": _script,
    "http.request": _url,
    "gateway.flip": _route,
    "mcp.call": _mcp,
    "k8s.scale": _scale,
    "k8s.configmap": _configmap,
    "flag.set": _flag,
    "noop": lambda p: "nothing (a noop step changes nothing)",
}


def step_target(action: str, params: Mapping[str, Any]) -> str:
    """The target of a step with ``action`` and ``params`` in words, e.g. "deployment checkout
    in namespace shop"; at most ``TARGET_LIMIT`` characters, cut between words."""
    describe = _TARGETS.get(action.removeprefix("step."))
    words = describe(params) if describe is not None else f"what the {action} step changes"
    return _cut_between_words(" ".join(words.split()), TARGET_LIMIT)


def _cut_between_words(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head) + "…"
