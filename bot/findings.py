"""The findings message: posted once in the case's thread when the agent records its findings,
after the plan of its looks. The cause in the agent's one sentence, whole; the evidence, each
linked to where it can be seen (the analyst's metrics before → now and when they moved, with
their graphs; the looks' metric readings, a Kubernetes fact, the changes with their pages); and
what could not be read, with why (a look's error is shown, never swallowed). Pure but for the
case's timeline it reads; mrkdwn, every outside word escaped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from bot.blocks import section, short_id
from bot.mrkdwn import escape, link, shown
from bot.plan_words import fitted
from core.investigate.gists import number
from core.investigate.progress import LookSeen

if TYPE_CHECKING:
    from core.bootstrap import App

SECTION_LIMIT = 3000  # Slack: a section's text
LINE = 300  # one line of evidence
CAUSE = 2500  # the cause, whole unless it would not fit a section
KUBE_LOOKS = ("kube_objects", "kube_events", "pod_logs", "rollout_history")


def findings_message(app: App, case_id: UUID, cause: str,
                     looks: list[LookSeen]) -> tuple[str, list[dict[str, Any]]]:
    """The message's text and blocks: the cause, the evidence, what was not readable."""
    analysis = _analysis(app, case_id)
    return findings_blocks(case_id, cause, analysis, looks)


def findings_blocks(case_id: UUID, cause: str, analysis: Mapping[str, Any],
                    looks: list[LookSeen]) -> tuple[str, list[dict[str, Any]]]:
    """``findings_message`` from what it read: ``analysis`` is the analyst's note's facts
    (``findings``, ``missing``)."""
    head = f"🔎 *Findings* for case `{short_id(case_id)}`\n{shown(cause, CAUSE)}"
    blocks = [{**section(head), "block_id": "findings_cause"}]
    evidence = [*_analyst_lines(analysis), *_look_lines(looks)]
    if evidence:
        blocks.append({**section(fitted("*Evidence*", evidence, SECTION_LIMIT, where="",
                                        kept_for_more=60)), "block_id": "findings_evidence"})
    unread = [*_missing_lines(analysis), *_error_lines(looks)]
    if unread:
        blocks.append({**section(fitted("*Not readable*", unread, SECTION_LIMIT, where="",
                                        kept_for_more=60)), "block_id": "findings_unread"})
    text = f"Findings for case {short_id(case_id)}: {shown(cause, 200)}"
    return text, blocks


def _analysis(app: App, case_id: UUID) -> Mapping[str, Any]:
    """The facts of the analyst's latest note on the case (empty when it noted none)."""
    noted = [row for row in app.cases.timeline(case_id) if row["event"] == "analysis_findings"]
    if not noted:
        return {}
    meta = noted[-1].get("meta") or {}
    facts = meta.get("context") if isinstance(meta, Mapping) else None
    return facts if isinstance(facts, Mapping) else {}


def _analyst_lines(analysis: Mapping[str, Any]) -> Iterable[str]:
    """Each metric the analyst found moved: before → now, when it moved, its graph."""
    for found in analysis.get("findings") or ():
        if not isinstance(found, Mapping):
            continue
        metric = str(found.get("metric") or "a metric")
        moved = found.get("changed_at_s")
        when = "" if not isinstance(moved, int | float) else \
            f", moved {_minutes(float(moved))} after the incident started"
        graph = link(found.get("link"), "graph")
        line = (f"• `{escape(metric)}` {number(found.get('baseline'), metric)} before → "
                f"{number(found.get('current'), metric)} now{when} "
                f"_(analyst, {float(found.get('confidence') or 0):.0%} sure)_")
        yield line + (f" {graph}" if graph else "")


def _minutes(seconds: float) -> str:
    if abs(seconds) < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def _look_lines(looks: list[LookSeen]) -> Iterable[str]:
    """The looks that answered: every metric reading, then a Kubernetes fact and the changes
    (the first look of each that read something), each with its sources' links."""
    done = [seen for seen in looks if seen.state == "complete" and seen.gist]
    kube = next((seen for seen in done if seen.tool in KUBE_LOOKS and
                 not str(seen.gist).startswith(("no ", "0 "))), None)
    chosen = [*(seen for seen in done if seen.tool == "query_metrics"),
              *([kube] if kube is not None else []),
              *(seen for seen in done if seen.tool == "recent_changes")]
    for seen in chosen:
        links = " ".join(filter(None, (link(source.url, source.label)
                                       for source in seen.sources)))
        yield f"• {shown(seen.gist, LINE)}" + (f" {links}" if links else "")


def _missing_lines(analysis: Mapping[str, Any]) -> Iterable[str]:
    for missing in analysis.get("missing") or ():
        if isinstance(missing, Mapping):
            yield (f"• `{escape(missing.get('metric'))}` (analyst): "
                   f"{shown(missing.get('reason'), LINE)}")


def _error_lines(looks: list[LookSeen]) -> Iterable[str]:
    for seen in looks:
        if seen.state == "error":
            reason = str(seen.gist or "no reason given").removeprefix("not read: ")
            yield f"• {shown(seen.title, 120)}: {shown(reason, LINE)}"
