"""Timeline events as people say them: "rejected", "verified", "approval refused" — never the
FSM's or the timeline's own names (``gate_rejected``, ``verify_pass``)."""

from __future__ import annotations

from bot.mrkdwn import escape

EVENT_WORDS = {
    "case_opened": "case opened", "start_analysis": "analysis started",
    "analysis_done": "analysis done", "analysis_findings": "findings", "moved_on": "moved on",
    "plan_ready": "plan proposed", "plan_approval": "approved",
    "gate_approved": "approved", "gate_rejected": "rejected",
    "gate_expired": "approval expired", "exec_done": "change done",
    "exec_failed": "change failed", "verify_pass": "verified",
    "verify_failed": "verification failed", "verify_reading": "verify reading",
    "step_result": "step ran", "rollback_result": "rollback step ran",
    "resume": "resumed", "fix": "re-planned", "note": "note",
    "message_pinned": "message pinned", "alert_firing": "alert firing",
    "alert_new": "new alert", "alert_resolved": "alert resolved",
    "alert_recurrence": "alert fired again",
}
"""Each timeline event as people say it: "rejected", "verified", never ``gate_rejected``."""
REFUSED_WORDS = {"plan_approval": "approval refused", "gate_approved": "approval refused",
                 "gate_rejected": "rejection refused"}


def event_words(event: object, outcome: str | None = None) -> str:
    """``event_said`` as mrkdwn."""
    return escape(event_said(event, outcome))


def event_said(event: object, outcome: str | None = None) -> str:
    """``gate_rejected`` → "rejected", ``verify_pass`` → "verified"; a refused request as
    "… refused" ("approval refused"); an event not listed with its underscores as spaces."""
    name = str(event)
    if outcome == "refused":
        said = REFUSED_WORDS.get(name) or f"{EVENT_WORDS.get(name, name.replace('_', ' '))} " \
            "refused"
    else:
        said = EVENT_WORDS.get(name, name.replace("_", " "))
    return said
