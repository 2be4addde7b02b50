"""A message on a JetStream stream: its ``Nats-Msg-Id`` header (which publication of which
outbox row) and its JSON body, written by the publisher and read back by the reader."""

from __future__ import annotations

import json

from core.messaging.envelope import Envelope


def message_id(envelope: Envelope) -> str:
    """The ``Nats-Msg-Id`` of a publication: the outbox row's id and which publication it is."""
    return f"{envelope.message_id}.{envelope.publication}"


def headers(envelope: Envelope) -> dict[str, str] | None:
    """A relay's publication carries its ``Nats-Msg-Id``; a message sent outside the relay
    (publication 0: a dead letter requeued after its outbox row was deleted) carries none, so
    sending it again within the duplicate window is not dropped as a repeat."""
    return {"Nats-Msg-Id": message_id(envelope)} if envelope.publication else None


def encode(envelope: Envelope) -> bytes:
    return json.dumps({"message_id": envelope.message_id, "topic": envelope.topic,
                       "key": envelope.key, "payload": envelope.payload},
                      separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> Envelope:
    fields = json.loads(data)
    return Envelope(int(fields["message_id"]), str(fields["topic"]), str(fields["key"]),
                    dict(fields["payload"]))
