"""opsgate and the Model Context Protocol, both ways: the case tools served to any agent
(``server``: stdio for ``opsgate mcp``, streamable HTTP at ``/mcp``), every write through the
gateway; and the external MCP servers our own agent and plans may call (``remote``)."""
