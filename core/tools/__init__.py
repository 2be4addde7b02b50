"""The case tools: one catalogue of what may be asked of a case (``catalogue``), with one
argument model per tool (``args``); the agent and the MCP server each adapt it."""
