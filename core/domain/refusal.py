"""``Refused``: a pure rule's no, with why in words. The state machine refuses a move it has no row
for (``fsm.MoveRefused``); the approval policy refuses an approval that must not count (not an
approver, the requester, an ineligible automatic approval): nothing of it is recorded as a yes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Refused:
    """A pure rule said no; ``reason`` says why, in words a person can act on; ``policies``:
    the approval policies that refused (Cedar's forbids), when a policy did."""

    reason: str
    policies: tuple[str, ...] = field(default=(), compare=False, kw_only=True)
