"""The REST API (FastAPI): parses, authenticates, hands commands to the case service, and sends
its replies unchanged. ``create_api(app)`` builds it."""

from __future__ import annotations

from core.api.app import create_api

__all__ = ["create_api"]
