"""Sends a service ``Reply`` as it is: the stored bytes, the status of its outcome, and headers
derived from it."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Response

from core.api.statuses import reply_status
from core.cases.replies import Reply
from core.domain.plans import canonical_json

JSON = "application/json"


def send_reply(reply: Reply[object], *, location: bool = False) -> Response:
    """The reply's exact body. Headers only describe it: ``ETag`` (the case version) on success,
    ``Idempotent-Replayed`` on a replay, ``Location`` of a new case."""
    headers: dict[str, str] = {}
    if reply.replayed:
        headers["Idempotent-Replayed"] = "true"
    if reply.ok:
        case = json.loads(reply.body)["data"]
        headers["ETag"] = etag(case["version"])
        if location:
            headers["Location"] = f"/case/{case['case_id']}"
    return Response(content=reply.body, status_code=reply_status(reply), media_type=JSON,
                    headers=headers)


def send_data(data: Any, headers: dict[str, str] | None = None) -> Response:
    """A read's answer, wrapped and rendered like every service reply."""
    return Response(content=canonical_json({"data": data}), media_type=JSON, headers=headers)


def etag(version: int) -> str:
    return f'"{version}"'
