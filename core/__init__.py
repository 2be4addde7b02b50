"""opsgate core."""
