"""A plan's steps as they touch the world: one adapter per step action (processes, HTTP, kubectl,
the traffic gateway, MCP tools), and the step runner (``runner.py``) that runs each step with its
retries through the gateway and notes every attempt on the case, for the executor consumer."""
