"""opsgate agent."""
