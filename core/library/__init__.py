"""The librarian's knowledge base: closed cases (full-text recall) and runbooks (one ranking).

``Library(engine)`` is the API others use: ``similar_cases(text, limit=3)`` (with what resolved
them), ``relevant_runbooks(text, limit=3)``, ``best_plan_for(text)`` (the plan of the most
similar verified case and the case it came from), ``recall(text)`` (both lists, for a thread or
the agent's context), ``index_case(case_id)`` and ``index_runbooks(folder)``.
``core.library.runbooks``: the runbooks folder as every reader resolves it, and the one runbook
ranking, which the agent's and the MCP server's tools and ``relevant_runbooks`` all use.
"""

from __future__ import annotations

from core.library.library import Document, Library

__all__ = ["Document", "Library"]
