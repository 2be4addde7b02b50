"""The pure domain of opsgate: case states and events, the FSM, ChangePlans. No I/O here."""
