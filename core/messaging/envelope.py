"""The message every bus carries: an outbox row, identified by the outbox id."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Envelope:
    """One outbox row on its way to consumers. ``message_id`` is the outbox id: consumers dedup
    on it, so a row published twice (a relay crashed before marking it) takes effect once."""

    message_id: int
    topic: str
    key: str
    payload: dict[str, Any] = field(default_factory=dict)

    def to_fields(self) -> dict[str, str]:
        """The Redis Streams entry for this message."""
        return {"message_id": str(self.message_id), "topic": self.topic, "key": self.key,
                "payload": json.dumps(self.payload, separators=(",", ":"), sort_keys=True)}

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Envelope:
        return cls(int(fields["message_id"]), fields["topic"], fields["key"],
                   json.loads(fields["payload"]))
