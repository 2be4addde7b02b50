"""The unit of work: one database transaction per request. It locks the case and recalls the
Idempotency-Key (a repeat gets the first reply), checks the fence, runs the handler's work, and
writes what the work gathered (or its refusal's audit row) together with the key's reply; a
request may bring one keyed follow-up (an opened case's first note) into the same transaction."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from core.cases.replies import Reply, ReplyOutcome
from core.cases.rows import TimelineRow
from core.db import case_store as store
from core.db.database import connection, transaction
from core.domain.commands import Fence
from core.domain.plans import canonical_json
from core.errors import KeyReuse, NotFound, OpsgateError, StaleFence
from core.messaging import inbox
from core.metrics import count_write

log = logging.getLogger(__name__)

T = TypeVar("T")
Row = Mapping[Any, Any]
# What a write does inside the transaction: read what it needs, gather its rows, return its data.
Work = Callable[[Connection, Row | None, store.Writes], T]


@dataclass(frozen=True)
class FollowUp:
    """A keyed request that follows another in its transaction, on the case it concerns:
    recalled by its own key (a repeat replays it) and written only when the first request's
    rows were (never after its replay or refusal)."""

    key: str
    digest: str
    case_id: UUID
    work: Work[Any]


class _Refusal(Exception):
    """A business refusal decided inside the transaction, to be stored and replied, with the
    timeline row that audits it (None: nothing to audit)."""

    def __init__(self, error: OpsgateError, timeline_row: TimelineRow | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.timeline_row = timeline_row


def refuse(error: OpsgateError, timeline_row: TimelineRow | None = None) -> Exception:
    """What a handler raises to refuse: the unit of work stores ``error`` as the key's reply,
    with ``timeline_row`` (its audit) when given, and writes nothing else."""
    return _Refusal(error, timeline_row)


def fingerprint(intent: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(intent).encode("utf-8")).hexdigest()


class UnitOfWork:
    """The transactions of one case service, on its engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def transaction(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine)

    def connection(self) -> AbstractContextManager[Connection]:
        return connection(self.engine)

    def run(self, key: str, digest: str, case_id: UUID | None, work: Work[T], *,
            fence: Fence | None = None, created: bool = False,
            inbox_entry: tuple[str, int] | None = None,
            then: Callable[[T], FollowUp] | None = None) -> Reply[T]:
        """``work`` once per ``key`` (whose request has the fingerprint ``digest``), on the case
        ``case_id`` locked (None: a new case); a consumer's ``inbox_entry`` commits with it, and
        so does the ``FollowUp`` that ``then`` makes of the work's data once it is written."""
        # A concurrent first arrival of the same key loses the primary-key race: run again and
        # the second pass replays the winner's reply.
        for attempt in (1, 2):
            try:
                with self.transaction() as conn:
                    reply, writes = _once(conn, key, digest, case_id, work, fence, created)
                    done: list[tuple[Reply[Any], store.Writes | None]] = [(reply, writes)]
                    if then is not None and writes is not None and reply.ok:
                        follow = then(reply.data())
                        done.append(_once(conn, follow.key, follow.digest, follow.case_id,
                                          follow.work, None, False))
                    if inbox_entry is not None:
                        inbox.mark(conn, *inbox_entry)
                for each, its_writes in done:
                    _account(each, its_writes)
                return reply
            except IntegrityError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def _account(reply: Reply[Any], writes: store.Writes | None) -> None:
    """Count and log one committed request."""
    timeline = None if writes is None else writes.timeline
    count_write(reply.error, reply.replayed, timeline)
    if timeline is not None and log.isEnabledFor(logging.INFO):
        _log_written(timeline, reply.outcome)


def _once(conn: Connection, key: str, digest: str, case_id: UUID | None, work: Work[T],
          fence: Fence | None, created: bool) -> tuple[Reply[T], store.Writes | None]:
    """The reply, and the writes it committed (None: a replay or refusal wrote nothing)."""
    case, early = _lock_and_recall(conn, key, digest, case_id, fence)
    if early is not None:
        return early, None
    return _perform(conn, key, digest, case, work, created)


def _lock_and_recall(conn: Connection, key: str, digest: str, case_id: UUID | None,
                     fence: Fence | None) -> tuple[Row | None, Reply[Any] | None]:
    """Lock the case and recall the key: the locked case, or the reply that ends the request
    before any work (no such case, a replay, a stale fence)."""
    case: Row | None = None
    prior: Row | None = None
    if case_id is None:
        prior = store.recall_reply(conn, key)
    else:
        case, prior = store.lock_case_and_recall(conn, case_id, key)
        if case is None:
            return None, Reply.of_error(NotFound(f"no case {case_id}", case_id=str(case_id)))
    if prior is not None:
        return case, _replay(prior, digest, key)
    if fence is not None and (stale := _stale(conn, fence)) is not None:
        return case, Reply.of_error(stale)
    return case, None


def _perform(conn: Connection, key: str, digest: str, case: Row | None, work: Work[T],
             created: bool) -> tuple[Reply[T], store.Writes]:
    """Run the work on the locked case; write what it did (or its refusal's timeline row)
    together with the key's reply."""
    writes = store.Writes()
    reply: Reply[T]
    try:
        reply = Reply.of_data(work(conn, case, writes),
                              ReplyOutcome.CREATED if created else ReplyOutcome.DONE)
    except _Refusal as refused:
        writes = store.Writes(timeline=refused.timeline_row)
        reply = Reply.of_error(refused.error)
    writes.reply = {"key": key, "fingerprint": digest, "outcome": str(reply.outcome),
                    "body": reply.body}
    store.write(conn, writes)
    return reply, writes


def _replay(prior: Row, digest: str, key: str) -> Reply[Any]:
    if prior["fingerprint"] != digest:
        reuse = KeyReuse("this Idempotency-Key was used before for a different request", key=key)
        return Reply.of_error(reuse)
    return Reply(ReplyOutcome(prior["outcome"]), str(prior["body"]), replayed=True)


def _stale(conn: Connection, fence: Fence) -> StaleFence | None:
    latest = store.fence_token(conn, fence.session_id)
    if latest is not None and fence.token >= latest:
        return None
    return StaleFence(
        f"fence token {fence.token} of session {fence.session_id} is stale",
        session_id=fence.session_id, token=fence.token, latest=latest,
    )


def _log_written(timeline: Mapping[str, Any], outcome: ReplyOutcome) -> None:
    meta = timeline.get("meta") or {}
    log.info("case %s %s (%s): %s -> %s", timeline["case_id"], timeline["event"],
             meta.get("outcome"), meta.get("from"), meta.get("to"),
             extra={"case_id": str(timeline["case_id"]), "event": timeline["event"],
                    "outcome": meta.get("outcome"), "reply": str(outcome),
                    "version": meta.get("version")})
