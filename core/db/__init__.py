"""Adapters from the core to its engines: SQL tables and sessions, Redis stores."""
