"""Operating opsgate: readiness, tracing a correlation id, reconciliation and
postmortem export. Each module reads the core's tables; none changes the FSM's rules."""
