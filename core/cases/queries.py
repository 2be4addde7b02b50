"""The case service's reads: a case, the case a short id names, its timeline, its plans, the
cases a reader may see. Each reads on its own connection; none writes. Only ``timeline`` reads
the whole timeline (a person asked for it); the reads a command or an event makes take the rows
of the events they judge (``moves``, ``timeline_of``, ``timeline_tail``), whatever it holds."""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

from core.cases.rows import case_view, timeline_view
from core.cases.timeline import Entry, accepted_moves, entries_of
from core.cases.uow import UnitOfWork
from core.db import case_store as store
from core.domain.dry_run import DryRunReport
from core.domain.fsm import CaseStatus
from core.domain.views import CaseView, ProposedPlan, TimelineEntry
from core.errors import InvalidRequest, NotFound

MIN_CASE_PREFIX = 4  # hex digits of a case id that name it, when no other case shares them
HEX_DIGITS = frozenset("0123456789abcdef")

Channels = Collection[str] | None
"""Which cases a reader may see: None, every one; else those whose chat thread is in one of
these channels (a reader's scope: a Slack channel, or an API principal's ``--channel``)."""


def only_one(ref: str, found: list[UUID]) -> UUID:
    """The one case of ``found`` that ``ref`` names; ``InvalidRequest`` when several share it."""
    if len(found) > 1:
        names = ", ".join(str(case_id)[:13] for case_id in found[:5])
        raise InvalidRequest(f"`{ref.strip().lower()}` matches several cases ({names}…): give "
                             "more of the id")
    return found[0]


class CaseReads:
    """The reads of the case service (``CaseService`` is one), on its unit of work."""

    uow: UnitOfWork

    def get_case(self, case_id: UUID, *, channels: Channels = None) -> CaseView:
        """The case ``case_id``; a case outside ``channels`` is ``NotFound`` as an unknown one."""
        with self.uow.connection() as conn:
            row = store.read_case(conn, case_id, channels)
        if row is None:
            raise NotFound(f"no case {case_id}", case_id=str(case_id))
        return case_view(row)

    def find_case_id(self, ref: str) -> UUID:
        """The case ``ref`` names: its id, or a prefix of at least ``MIN_CASE_PREFIX`` of its
        hex digits (dashes optional, any case) that no other case shares. ``InvalidRequest``
        for anything else or a prefix several cases share, ``NotFound`` when none has it."""
        found = self.case_ids_matching(ref, limit=6)
        if not found:
            raise NotFound(f"no case id starts with `{ref.strip().lower()}`", case=ref)
        return only_one(ref, found)

    def case_ids_matching(self, ref: str, *, limit: int) -> list[UUID]:
        """Up to ``limit`` ids of the cases ``ref`` may name (``find_case_id``'s rule), for a
        caller that chooses among them; ``InvalidRequest`` when ``ref`` is no case id."""
        digits = ref.strip().lower().replace("-", "")
        if not MIN_CASE_PREFIX <= len(digits) <= 32 or set(digits) - HEX_DIGITS:
            raise InvalidRequest(f"`{ref}` is not a case id: give at least {MIN_CASE_PREFIX} "
                                 "hex digits of its id")
        with self.uow.connection() as conn:
            return store.case_ids_starting_with(conn, digits, limit=limit)

    def case_ids_in(self, case_ids: Collection[UUID], channels: Channels) -> set[UUID]:
        """Those of ``case_ids`` a reader limited to ``channels`` may see (all when None)."""
        if channels is None:
            return set(case_ids)
        with self.uow.connection() as conn:
            return store.case_ids_in_channels(conn, case_ids, channels)

    def timeline(self, case_id: UUID, *, channels: Channels = None) -> list[TimelineEntry]:
        with self.uow.connection() as conn:
            if store.read_case(conn, case_id, channels) is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            return [timeline_view(row) for row in store.read_timeline(conn, case_id)]

    def moves(self, case_id: UUID) -> tuple[Entry, ...]:
        """The case's accepted moves, oldest first (``timeline.accepted_moves``)."""
        with self.uow.connection() as conn:
            if store.read_case(conn, case_id) is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            return accepted_moves(conn, case_id)

    def timeline_of(self, case_id: UUID, event: str) -> tuple[Entry, ...]:
        """The case's timeline rows of ``event`` only, oldest first."""
        with self.uow.connection() as conn:
            return entries_of(store.timeline_events(conn, case_id, (event,)))

    def timeline_tail(self, case_id: UUID, rows: int, *,
                      channels: Channels = None) -> tuple[list[TimelineEntry], int]:
        """The case's last ``rows`` timeline rows, oldest first, and how many it holds."""
        with self.uow.connection() as conn:
            if store.read_case(conn, case_id, channels) is None:
                raise NotFound(f"no case {case_id}", case_id=str(case_id))
            tail, total = store.timeline_tail(conn, case_id, rows)
            return [timeline_view(row) for row in tail], total

    def planning_round(self, case_id: UUID) -> int:
        """The version at which the case last entered PLANNING: stable while the plan waits at
        the gate, new after a park and resume, so a re-plan is a new intent."""
        round_ = 0
        for entry in self.moves(case_id):
            if entry.target == CaseStatus.PLANNING:
                round_ = entry.version or 0
        return round_

    def plan_dry_run(self, case_id: UUID, digest: str, version: int) -> DryRunReport | None:
        """The dry run of the plan ``digest`` as it was proposed at case ``version`` (what its
        ``plan_ready`` row recorded); None when that proposal had none."""
        for entry in self.moves(case_id):
            if entry.event == "plan_ready" and entry.accepted and entry.version == version \
                    and entry.plan_hash == digest and entry.dry_run:
                return DryRunReport.of_facts(digest, list(entry.dry_run))
        return None

    def list_cases(self, status: CaseStatus | None = None, limit: int = 50, *,
                   channels: Channels = None, threadless: bool = False) -> list[CaseView]:
        """The newest cases first (those in ``status``; those in ``channels``, and with
        ``threadless`` those without a chat thread too)."""
        with self.uow.connection() as conn:
            rows = store.list_cases(conn, None if status is None else str(status), limit,
                                    channels, threadless=threadless)
        return [case_view(row) for row in rows]

    def proposed_plan(self, case_id: UUID, digest: str | None = None) -> ProposedPlan | None:
        """The case's plan with hash ``digest`` (its latest plan when None): ``plan_hash``,
        ``plan``, ``case_version``, ``proposed_by``; None when there is none."""
        with self.uow.connection() as conn:
            row = (store.latest_plan(conn, case_id) if digest is None
                   else store.plan_by_hash(conn, case_id, digest))
        if row is None:
            return None
        return {"plan_hash": row["plan_hash"], "plan": dict(row["plan"]),
                "case_version": row["case_version"], "proposed_by": row["proposed_by"]}
