"""The librarian's knowledge base: closed cases and runbooks, recalled by words and meaning.

``Library(engine, embedder)`` is the API others use (``App.library`` builds it from settings):
``similar_cases(text, limit=3)`` (with what resolved them), ``relevant_runbooks(text, limit=3)``,
``find_runbooks(folder, query)`` (the agent's and the MCP server's ``runbooks`` tool),
``best_plan_for(text)`` (the plan of the most similar verified case and the case it came from),
``recall(text)`` (both lists, for a thread or the agent's context), ``index_case(case_id)``,
``index_runbooks(folder)``, and ``meaning`` (the embedding model and its vectors: ``problem()``,
``reindex()``). Every recall goes through one ranking: ``core.library.hybrid``.
"""

from __future__ import annotations

from core.library.documents import Document
from core.library.library import Library

__all__ = ["Document", "Library"]
