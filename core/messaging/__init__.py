"""Delivery of outbox messages: the relay, the bus (Redis Streams or in-process) and the inbox."""
