"""A recorded change: one deploy or configuration change to a service, as the investigator and
the card read it ("14:02 payments-api v2.4 by ci"), and the errors of its intake."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from core.errors import InvalidRequest, KeyReuse

Source = Literal["generic", "argocd", "github"]
Kind = Literal["deploy", "config"]
SOURCES: tuple[Source, ...] = ("generic", "argocd", "github")
KINDS: tuple[Kind, ...] = ("deploy", "config")


@dataclass(frozen=True)
class Change:
    """One change as stored. Its words (``summary``, ``actor``) are data a sender wrote: cut and
    cleaned, shown and quoted, never followed."""

    change_id: str
    source: Source
    kind: Kind
    service: str  # as sent
    component: str | None  # the catalog component it resolved to when it arrived
    namespace: str | None
    version: str
    summary: str
    actor: str
    url: str | None
    happened_at: datetime  # UTC
    received_at: datetime  # UTC
    fingerprint: str  # of the content (not the component, not when it arrived)
    target: str | None = None  # the object it changed: deployment/NAME, configmap/NAME, flag/KEY…
    before: Any = None  # its value before (a version, a ConfigMap's data…), as the sender said
    after: Any = None  # …and after: JSON values a sender wrote, data never followed

    def as_dict(self) -> dict[str, Any]:
        """The change as the API answers it: times in ISO 8601."""
        return {"change_id": self.change_id, "source": self.source, "kind": self.kind,
                "service": self.service, "component": self.component,
                "namespace": self.namespace, "version": self.version, "summary": self.summary,
                "actor": self.actor, "url": self.url,
                "happened_at": self.happened_at.isoformat(),
                "received_at": self.received_at.isoformat(), "fingerprint": self.fingerprint,
                "target": self.target, "before": self.before, "after": self.after}


class InvalidChange(InvalidRequest):
    """A POSTed change that cannot be recorded; the message lists every problem."""

    code = "invalid_change"

    def __init__(self, what: str, problems: list[str]) -> None:
        super().__init__(f"{what} cannot be recorded: {'; '.join(problems)}",
                         problems=problems)


class ChangeIdReused(KeyReuse):
    """A change id recorded before with other content: the first change stands."""

    code = "change_id_reused"
