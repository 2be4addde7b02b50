"""opsgate bot."""
