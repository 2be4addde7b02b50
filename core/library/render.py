"""A case's evidence as text: for the agent's context and the ``/case similar <id>`` reply.
Pure functions of ``Library.evidence_for``'s answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def alike(best: Mapping[str, Any]) -> str:
    """How a past case (``Library.best_plan_for``'s answer) is like the new one, in words: the
    words their titles share, and how alike they are in meaning."""
    said = []
    if best.get("shared"):
        said.append(f"shared words: {', '.join(best['shared'])}")
    if best.get("similarity") is not None:
        said.append(f"alike in meaning: {float(best['similarity']):.2f} of 1")
    return "; ".join(said) or "found by the library"


def evidence_text(evidence: Mapping[str, Any]) -> str:
    """Findings, similar past cases (with what resolved them), runbooks and the plan the most
    similar verified case was resolved with; one line each, "none" where there is nothing."""
    lines = ["Findings:"]
    lines += [f"- {f.get('summary')} (confidence {float(f.get('confidence', 0)):.0%}, "
              f"query: {f.get('link') or f.get('query')})"
              for f in evidence.get("findings") or []] or ["- none"]
    lines.append("Similar past cases:")
    lines += [f"- {c.get('title')} (case {c.get('case_id')}): resolved by "
              f"{c.get('resolved_by') or 'its plan'}; "
              f"{'not verified' if c.get('stand_in') else 'verified'}: {c.get('verification')}"
              for c in evidence.get("similar_cases") or []] or ["- none"]
    lines.append("Relevant runbooks:")
    lines += [f"- {r.get('title')} ({r.get('path')})"
              for r in evidence.get("runbooks") or []] or ["- none"]
    best = evidence.get("best_plan")
    if best:
        lines.append(f"Plan that resolved the most similar verified case ({best['case_id']}): "
                     f"{best['plan'].get('title')}")
    return "\n".join(lines)
