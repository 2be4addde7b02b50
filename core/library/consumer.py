"""The librarian consumer (``evt.case.transition.v1``): when a case is CLOSED (verified), it goes
into the library with what resolved it; the runbooks folder is re-read beside it (unchanged
files write nothing). Indexing is idempotent, so a redelivery is harmless."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from uuid import UUID

from core.domain.fsm import CaseStatus
from core.domain.messages import Topic, TransitionPayload, payload_as
from core.library.library import Library
from core.library.runbooks import runbooks_folder
from core.messaging.consumer import Delivery

if TYPE_CHECKING:
    from core.bootstrap import App

log = logging.getLogger(__name__)


class Librarian:
    """Consumer of the transition facts: indexes each case that reaches CLOSED."""

    name = "librarian"
    topics: tuple[str, ...] = (Topic.CASE_TRANSITION,)

    def __init__(self, app: App, library: Library | None = None) -> None:
        self.library = library or app.library
        self.runbooks_dir = app.settings.runbooks_dir

    def handle(self, delivery: Delivery) -> None:
        payload = payload_as(TransitionPayload, delivery.envelope.payload)
        if payload.get("to") != CaseStatus.CLOSED:
            return
        case_id = UUID(str(payload["case_id"]))
        if self.library.index_case(case_id):
            log.info("librarian: indexed closed case %s", case_id)
        if self.runbooks_dir:
            self.library.index_runbooks(runbooks_folder(self.runbooks_dir))
