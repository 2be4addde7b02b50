"""The investigator's alert reads (``list_alerts``): the alerts Alertmanager holds for one
component (active, silenced and inhibited, each with its state) and the silences that concern it,
through Alertmanager's API v2, narrowed to the component's metric labels.

Annotations and comments are text from the monitored world: they are answered as data, cut to
``MAX_TEXT`` characters. Alertmanager's filter narrows what it sends, and every alert is checked
again against the labels here (fail closed). An unreachable Alertmanager is ``AlertsUnavailable``;
an answer that cannot be used is the answer's ``alerts_error`` / ``silences_error`` sentence
(the keys of the two answers differ, so ``list_alerts`` can merge them)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from core.alerts.text import cut, shortened
from core.domain.promql import quoted
from core.errors import Unavailable
from core.investigate.metrics import iso
from core.investigate.scope import Labels, OutOfScope, Target, matches
from core.outbound.allowlists import Origin
from core.outbound.http import RedirectRefused, send
from core.strict_json import loads as strict_loads

MAX_ALERTS = 50
MAX_SILENCES = 50
MAX_TEXT = 500
MAX_LABEL_VALUE_CHARS = 200
BODY_LIMIT = 1_048_576
DEFAULT_TIMEOUT_S = 10.0
SILENCE_ID = re.compile(r"[0-9A-Za-z-]{1,64}")
STATE_ORDER = ("active", "unprocessed", "silenced", "inhibited", "suppressed")
"""Firing alerts first: what still pages someone."""


class AlertsUnavailable(Unavailable):
    """Alertmanager did not answer (unreachable, refused, timed out): read again later."""

    code = "alerts_unavailable"


class _Failed(Exception):
    """Alertmanager answered, but not with something usable: the sentence goes into the answer."""


class AlertsReader:
    """Alertmanager at ``base_url`` (API v2), read for one component at a time."""

    def __init__(self, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._base = base_url.rstrip("/")
        self._origin = Origin.of(httpx.URL(self._base))
        self.timeout_s = timeout_s

    def alerts(self, target: Target) -> dict[str, Any]:
        """The component's alerts, active, silenced and inhibited (at most ``MAX_ALERTS``,
        firing first, newest first), each with its state, severity, start, summary and
        description, and labels."""
        labels = _metric_labels(target)
        head = _head(target)
        try:
            found = self._alerts(labels, silenced_only=False)
        except _Failed as failed:
            return head | {"alerts_error": str(failed), "alerts": [], "alerts_total": 0,
                           "alerts_notes": []}
        shown = sorted((alert_summary(alert) for alert in found),
                       key=lambda a: a["startsAt"] or "", reverse=True)  # newest first …
        shown.sort(key=_state_rank)  # … within firing first
        notes = []
        if len(shown) > MAX_ALERTS:
            notes.append(f"{len(shown) - MAX_ALERTS} more alerts cut (at most {MAX_ALERTS} are "
                         "shown, firing and newest first)")
        return head | {"alerts": shown[:MAX_ALERTS], "alerts_total": len(shown),
                       "alerts_notes": notes}

    def silences(self, target: Target) -> dict[str, Any]:
        """The active and pending silences that concern the component: those with an equality
        matcher on each of its labels, and those silencing one of its alerts now (a regex or
        a silence on other labels that Alertmanager found to match)."""
        labels = _metric_labels(target)
        head = _head(target)
        try:
            silenced = self._alerts(labels, silenced_only=True)
            by_id = {str(s.get("id")): s for s in self._list("/api/v2/silences", labels)
                     if naming(s, labels)}
            silencing = _silencing(silenced)
            for silence_id in sorted(set(silencing) - set(by_id))[:MAX_SILENCES]:
                found = self._silence(silence_id)
                if found is not None:
                    by_id[silence_id] = found
        except _Failed as failed:
            return head | {"silences_error": str(failed), "silences": [], "silences_total": 0,
                           "silences_notes": []}
        shown = sorted((silence_summary(s, silencing.get(i, ())) for i, s in by_id.items()
                        if _state(s) in ("active", "pending")),
                       key=lambda s: (s["state"] != "active", s["endsAt"] or ""))
        notes = []
        if len(shown) > MAX_SILENCES:
            notes.append(f"{len(shown) - MAX_SILENCES} more silences cut (at most "
                         f"{MAX_SILENCES} are shown)")
        return head | {"silences": shown[:MAX_SILENCES], "silences_total": len(shown),
                       "silences_notes": notes}

    def _alerts(self, labels: Labels, *, silenced_only: bool) -> list[dict[str, Any]]:
        # Silenced only: those silenced (and perhaps inhibited too), for their silences' ids.
        flags = {"active": not silenced_only, "silenced": True, "inhibited": True,
                 "unprocessed": not silenced_only}
        found = self._list("/api/v2/alerts", labels,
                           {k: str(v).lower() for k, v in flags.items()})
        # Alertmanager's filter narrowed them; whatever it sent is checked here too.
        return [a for a in found if isinstance(a.get("labels"), Mapping)
                and matches(a["labels"], labels)]

    def _list(self, path: str, labels: Labels,
              flags: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"filter": [f"{k}={quoted(v)}" for k, v in labels],
                                  **(flags or {})}
        doc = self._get(path, params)
        if not isinstance(doc, list):
            raise _Failed(f"Alertmanager's answer to {path} is not a list")
        return [item for item in doc if isinstance(item, dict)]

    def _silence(self, silence_id: str) -> dict[str, Any] | None:
        """One silence by its id; None when Alertmanager no longer has it."""
        if not SILENCE_ID.fullmatch(silence_id):
            raise _Failed(f"Alertmanager named a silence {silence_id[:80]!r} that is not an id")
        doc = self._get(f"/api/v2/silence/{silence_id}", {}, missing=True)
        if doc is None:
            return None
        if not isinstance(doc, dict):
            raise _Failed(f"Alertmanager's silence {silence_id} is not an object")
        return doc

    def _get(self, path: str, params: Mapping[str, Any], *, missing: bool = False) -> Any:
        """Alertmanager's JSON answer to ``GET path`` (None for a 404 when ``missing``);
        ``AlertsUnavailable`` when it cannot be reached or does not answer 2xx, ``_Failed``
        when the answer is unusable."""
        url = httpx.URL(self._base + path).copy_merge_params(dict(params))
        try:
            reply = send("GET", url, allowed=lambda u: Origin.of(u) == self._origin,
                         timeout_s=self.timeout_s, body_limit=BODY_LIMIT)
        except (httpx.HTTPError, RedirectRefused) as exc:
            raise AlertsUnavailable(f"Alertmanager is unreachable ({type(exc).__name__}); read "
                                    "the alerts again later") from exc
        if missing and reply.status == 404:
            return None
        if not 200 <= reply.status < 300:
            raise AlertsUnavailable(f"Alertmanager answered HTTP {reply.status} to {path}: "
                                    f"{_cut(reply.text().strip(), 200)}")
        if reply.truncated:
            raise _Failed(f"Alertmanager's answer is over {BODY_LIMIT} bytes")
        try:
            return strict_loads(reply.body)
        except ValueError as exc:
            raise _Failed(f"Alertmanager's answer to {path} is not JSON") from exc


def _metric_labels(target: Target) -> Labels:
    """The labels every alert of ``target`` carries; fail closed when it names none."""
    if not target.metric_labels:
        raise OutOfScope(f"{target.name} names no metric labels (annotation "
                         "opsgate.dev/metric-labels); no alert can be read for it")
    return target.metric_labels


def _head(target: Target) -> dict[str, Any]:
    return {"component": target.name, "labels": dict(target.metric_labels)}


# -- the answer -----------------------------------------------------------------------------------


def alert_summary(alert: Mapping[str, Any]) -> dict[str, Any]:
    """One alert as the model reads it; its annotations are data, cut to ``MAX_TEXT``."""
    labels = _texts(alert.get("labels"), MAX_LABEL_VALUE_CHARS, shortened)
    annotations = _texts(alert.get("annotations"), MAX_TEXT, cut)
    found = alert.get("status")
    status: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    silenced_by, inhibited_by = _ids(status.get("silencedBy")), _ids(status.get("inhibitedBy"))
    state = ("silenced" if silenced_by else "inhibited" if inhibited_by
             else _cut(str(status.get("state") or "unknown"), 20))
    return {"alertname": labels.get("alertname"), "state": state,
            "severity": labels.get("severity"), "startsAt": _moment(alert.get("startsAt")),
            "summary": annotations.get("summary"), "description": annotations.get("description"),
            "labels": labels, "silenced_by": silenced_by, "inhibited_by": inhibited_by}


def silence_summary(silence: Mapping[str, Any], silencing: Iterable[str]) -> dict[str, Any]:
    """One silence: who made it, why, until when, its matchers, and which of the component's
    alerts it silences now."""
    return {"id": _cut(str(silence.get("id")), 64), "state": _state(silence),
            "matchers": [_matcher(m) for m in _matchers(silence)],
            "createdBy": _cut(str(silence.get("createdBy") or ""), MAX_LABEL_VALUE_CHARS),
            "comment": cut(str(silence.get("comment") or ""), MAX_TEXT),
            "startsAt": _moment(silence.get("startsAt")), "endsAt": _moment(silence.get("endsAt")),
            "silencing": sorted(set(silencing))}


def naming(silence: Mapping[str, Any], labels: Labels) -> bool:
    """Whether ``silence`` has an equality matcher (``service="payments-api"``, not a regex nor
    a negation) on each of ``labels``."""
    equal = {(str(m.get("name")), str(m.get("value"))) for m in _matchers(silence)
             if not m.get("isRegex") and m.get("isEqual", True)}
    return all(pair in equal for pair in labels)


def _silencing(alerts: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Silence id → the names of the component's alerts it silences."""
    by_id: dict[str, list[str]] = {}
    for alert in alerts:
        summary = alert_summary(alert)
        for silence_id in summary["silenced_by"]:
            by_id.setdefault(silence_id, []).append(str(summary["alertname"]))
    return by_id


def _state_rank(alert: Mapping[str, Any]) -> int:
    state = alert["state"]
    return STATE_ORDER.index(state) if state in STATE_ORDER else len(STATE_ORDER)


def _state(silence: Mapping[str, Any]) -> str:
    status = silence.get("status")
    return str(status.get("state")) if isinstance(status, Mapping) else "unknown"


def _matchers(silence: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = silence.get("matchers")
    return [m for m in found if isinstance(m, Mapping)] if isinstance(found, list) else []


def _matcher(matcher: Mapping[str, Any]) -> str:
    regex, equal = bool(matcher.get("isRegex")), bool(matcher.get("isEqual", True))
    op = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
    text = f"{matcher.get('name')}{op}{quoted(str(matcher.get('value')))}"
    return _cut(text, MAX_LABEL_VALUE_CHARS)


def _texts(found: Any, limit: int, shorten: Callable[[str, int], str]) -> dict[str, str]:
    if not isinstance(found, Mapping):
        return {}
    return {shortened(str(k), 100): shorten(str(v), limit) for k, v in found.items()}


def _ids(found: Any) -> list[str]:
    return [_cut(str(i), 64) for i in found] if isinstance(found, list) else []


def _moment(text: Any) -> str | None:
    """Alertmanager's RFC 3339 time as the answers write moments; kept as sent (cut) when it
    cannot be read."""
    if not isinstance(text, str):
        return None
    try:
        return iso(datetime.fromisoformat(text))
    except ValueError:
        return _cut(text, 40)


def _cut(text: str, limit: int) -> str:
    return shortened(text, limit)
