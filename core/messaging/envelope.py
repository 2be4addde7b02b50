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
    publication: int = field(default=0, compare=False)
    """Which publication of the row this is (the outbox's ``attempts`` once marked): a relay's
    retry of the same claim repeats it, a deliberate resend (watchdog, requeue) does not."""

    def to_fields(self) -> dict[str, str]:
        """The Redis Streams entry for this message."""
        return {"message_id": str(self.message_id), "topic": self.topic, "key": self.key,
                "payload": json.dumps(self.payload, separators=(",", ":"), sort_keys=True)}

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Envelope:
        return cls(int(fields["message_id"]), fields["topic"], fields["key"],
                   json.loads(fields["payload"]))
