"""A plan's steps as they touch the world: one adapter per step action (processes, HTTP, kubectl,
the traffic gateway, MCP tools), run by the executor consumer. No bus, no database."""
