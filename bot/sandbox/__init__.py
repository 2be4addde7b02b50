"""A local Slack for opsgate's bot: an in-memory workspace, Slack's Web API, signed Events API,
slash-command and interactivity requests, and a page to drive them from a browser
(``opsgate demo``, docs/demo.md)."""
