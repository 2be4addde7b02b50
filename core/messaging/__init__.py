"""Delivery of outbox messages: the outbox queries, the relay, the bus (Redis Streams or
in-process), the inbox, and the supervisor that keeps the relay and consumer threads running."""
