"""An Alertmanager webhook notification (version 4) as opsgate reads it: its alerts cleaned and
cut to each field's budget (``core.alerts.text``), never refused; the group's digest, the case's
title and severity; each alert as a ``Sighting``; and ``Intake``, what a notification did."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from core.alerts.text import cut, shortened, storable

TITLE_MAX = 200
# Characters kept of each text (more is cut, with a marker): evidence keeps a label value or an
# annotation up to these; a note's line says an alert's summary in at most SAID_MAX.
LABEL_MAX = 2_000
ANNOTATION_MAX = 8_000
URL_MAX = 8_000  # a longer generatorURL is not kept as a link (a cut link leads nowhere)
GROUP_KEY_MAX = 4_096  # as stored; the group is known by the digest of the whole key
RECEIVER_MAX = 200
SAID_MAX = 500
LISTED_MAX = 20  # alerts an opening note names (its evidence keeps them all)
SEVERITIES = {
    "critical": "SEV1", "page": "SEV1", "sev1": "SEV1",
    "error": "SEV2", "high": "SEV2", "major": "SEV2", "sev2": "SEV2",
    "warning": "SEV3", "warn": "SEV3", "minor": "SEV3", "sev3": "SEV3",
    "info": "SEV4", "low": "SEV4", "none": "SEV4", "sev4": "SEV4",
}
DEFAULT_SEVERITY = "SEV3"


class _Lenient(BaseModel):
    # Alertmanager may add fields in later releases: ignored, not refused.
    model_config = ConfigDict(extra="ignore", frozen=True)


def _within(limit: int) -> AfterValidator:
    """Text kept as stored: storable, cut to ``limit`` characters (``alert_text.cut``)."""
    return AfterValidator(lambda text: cut(text, limit))


# What an alert says is stored cut and cleaned, never refused (no alert is lost at the door);
# only the fields that identify an alert must be as Alertmanager sends them.
Storable = Annotated[str, AfterValidator(storable)]
LabelText = Annotated[str, _within(LABEL_MAX)]
AnnotationText = Annotated[str, _within(ANNOTATION_MAX)]


class Alert(_Lenient):
    """One alert of a notification (field names are Alertmanager's own)."""

    status: Literal["firing", "resolved"]
    labels: dict[LabelText, LabelText] = Field(default_factory=dict)
    annotations: dict[LabelText, AnnotationText] = Field(default_factory=dict)
    startsAt: Storable = Field(default="", max_length=64)
    endsAt: Storable = Field(default="", max_length=64)
    generatorURL: Storable = ""
    fingerprint: Storable = ""


class Notification(_Lenient):
    """One webhook notification: the current state of one alert group. Its number of alerts is
    bounded by the API's body limit for this endpoint (``core.api.alerts``)."""

    version: Literal["4"]
    groupKey: Storable = Field(min_length=1)
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: Annotated[str, _within(RECEIVER_MAX)] = ""
    groupLabels: dict[LabelText, LabelText] = Field(default_factory=dict)
    commonLabels: dict[LabelText, LabelText] = Field(default_factory=dict)
    commonAnnotations: dict[LabelText, AnnotationText] = Field(default_factory=dict)
    externalURL: Storable = ""
    alerts: list[Alert] = Field(default_factory=list)


@dataclass(frozen=True)
class Sighting:
    """One alert of a notification: its identity, state and what the evidence keeps of it
    (``labels``, ``annotations``, ``url``)."""

    fingerprint: str
    starts_at: str
    firing: bool
    ends_at: str | None
    alert: dict[str, Any]

    @property
    def identity(self) -> tuple[str, str]:
        return self.fingerprint, self.starts_at


@dataclass
class Intake:
    """What one notification did: the group, the case its alerts belong to (and its
    recurrence), whether this notification opened a case, and the notes it wrote or left
    pending."""

    group: str
    case_id: str | None = None
    recurrence: int | None = None
    opened: bool = False
    new_alerts: int = 0
    resolved_noted: int = 0
    resolved_pending: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "case_id": self.case_id, "recurrence": self.recurrence,
                "opened": self.opened, "new_alerts": self.new_alerts,
                "resolved_noted": self.resolved_noted,
                "resolved_pending": self.resolved_pending}


def group_digest(group_key: str) -> str:
    return hashlib.sha256(group_key.encode("utf-8")).hexdigest()


def title_of(note: Notification) -> str:
    labels = {**note.groupLabels, **note.commonLabels}
    name = labels.get("alertname") or ", ".join(f"{k}={v}" for k, v in
                                                 sorted(note.groupLabels.items()))
    summary = note.commonAnnotations.get("summary") or note.commonAnnotations.get("description")
    if not summary and len(note.alerts) == 1:
        summary = note.alerts[0].annotations.get("summary")
    title = f"{name or 'alert'}: {summary}" if summary else (name or "alert")
    return shortened(title, TITLE_MAX)


def severity_of(note: Notification) -> str:
    labels = {**note.groupLabels, **note.commonLabels}
    return SEVERITIES.get(labels.get("severity", "").lower(), DEFAULT_SEVERITY)


def without_credentials(url: str) -> str:
    """An http(s) link as it may be stored and shown: any ``user:pass@`` removed; "" for
    anything else."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > URL_MAX:
        return ""
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def sightings_of(note: Notification, title: str) -> list[Sighting]:
    """The notification's alerts as the intake keeps them. A resolved notification without
    alerts stands for the whole group."""
    if note.status == "resolved" and not note.alerts:
        whole = {"labels": {"alertname": title}, "url": "",
                 "annotations": {"summary": "the alert group resolved"}}
        return [Sighting("group", "", firing=False, ends_at="", alert=whole)]
    return [Sighting(_fingerprint(a), a.startsAt, firing=a.status == "firing",
                     ends_at=None if a.status == "firing" else a.endsAt,
                     alert={"labels": a.labels, "annotations": a.annotations,
                            "url": without_credentials(a.generatorURL)})
            for a in note.alerts]


def _fingerprint(alert: Alert) -> str:
    """Alertmanager's fingerprint (16 hex digits); a digest of it when longer than the column,
    of the labels when missing."""
    if not alert.fingerprint:
        return hashlib.sha256(repr(sorted(alert.labels.items())).encode()).hexdigest()[:16]
    if len(alert.fingerprint) > 64:
        return hashlib.sha256(alert.fingerprint.encode()).hexdigest()
    return alert.fingerprint
