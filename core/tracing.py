"""The correlation id of the work in hand: one id from the REST call or Slack request through
the gateway, the transition, the outbox message and the consumer that handles it; and the
logging set-up that prints it (readable text by default, one JSON object a line when asked)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from uuid import uuid4

_CURRENT: ContextVar[str | None] = ContextVar("opsgate_correlation_id", default=None)


def current() -> str | None:
    """The correlation id bound to this thread or task, if any."""
    return _CURRENT.get()


def new_id() -> str:
    return uuid4().hex


@contextmanager
def bound(correlation_id: str | None) -> Iterator[str | None]:
    """Bind ``correlation_id`` for the block (None keeps whatever is bound)."""
    if correlation_id is None:
        yield current()
        return
    token = _CURRENT.set(correlation_id)
    try:
        yield correlation_id
    finally:
        _CURRENT.reset(token)


class CorrelationFilter(logging.Filter):
    """Puts the bound correlation id on every record (``-`` when none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "correlation_id"):
            record.correlation_id = current() or "-"
        return True


_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "correlation_id"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, correlation_id, and any
    ``extra=`` fields the call passed."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "correlation_id": getattr(record, "correlation_id", None) or current(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s] %(message)s"


def configure_logging(log_format: str = "text", level: str = "INFO") -> logging.Handler:
    """Send opsgate's logs to stderr as text (for people) or JSON (for log pipelines); replaces
    the handler an earlier call installed. Returns the handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(CorrelationFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else
                         logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_opsgate", False)]:
        root.removeHandler(old)
    handler._opsgate = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
