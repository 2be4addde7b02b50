"""What the model is told about one tool call (``ToolReply``), and how a case-service reply
becomes a result, a business refusal or the end of the run (``LostLock``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from core.cases.replies import Reply
from core.errors import InternalError, StaleFence
from core.gateway import reply_data as gateway_reply_data

T = TypeVar("T")


class LostLock(InternalError):
    """The run's session lock or fence is no longer the latest: it must stop writing."""

    code = "lost_lock"


@dataclass(frozen=True)
class ToolReply:
    """What the model is told about one tool call."""

    ok: bool
    content: str
    invalid_plan: bool = False

    @classmethod
    def of(cls, ok: bool, body: Mapping[str, Any], **flags: bool) -> ToolReply:
        return cls(ok, json.dumps(body, default=str, sort_keys=True), **flags)


def reply_data(reply: Reply[T]) -> T:
    """``core.gateway.reply_data``, where a stale fence ends the run (``LostLock``)."""
    try:
        return gateway_reply_data(reply)
    except StaleFence as error:
        raise LostLock(error.message) from error
