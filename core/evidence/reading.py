"""One reading of a plan's ``verify`` block: its checks in order until one does not hold; a
metric check judged on its window after the change once that has passed, pending before. The
reading says every check it read with its value: the one that did not hold, then those that did
("check 2 of 2: …, not below 500 (check 1 of 2 holds: …)"); "all 2 checks passed: …; …"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.domain.verify import (
    MetricCheck,
    ProbeCheck,
    VerifyBlock,
    parse_verify,
    problem_lines,
)
from core.errors import InvalidPlan
from core.evidence.outcome import VerifyOutcome, cannot
from core.evidence.probes import probe_url, read_probe
from core.evidence.scope import Moment
from core.evidence.sources import (
    EvidenceMissing,
    MetricSource,
    QueryRefused,
    QueryTimedOut,
    Worst,
)
from core.outbound.allowlists import UrlAllowList


def evaluate(verify: Any, source: MetricSource, probe_allowlist: UrlAllowList, *,
             timeout_s: float = 10.0, moment: Moment | None = None) -> VerifyOutcome:
    """One reading of ``verify`` against ``source`` (metrics) and allow-listed HTTP probes."""
    try:
        block = parse_verify(verify)
    except InvalidPlan:
        return cannot("; ".join(problem_lines(verify)))
    return read_block(block, source, probe_allowlist, moment or Moment(), timeout_s=timeout_s)


def read_block(block: VerifyBlock, source: MetricSource, allowlist: UrlAllowList,
               moment: Moment, *, timeout_s: float = 10.0) -> VerifyOutcome:
    """One reading of a parsed block: every check in order until one does not hold."""
    refused = _refused_probes(block, allowlist)
    if refused is not None:
        return refused
    count = len(block.checks)
    held: list[str] = []  # each check that held so far, with its reading
    for number, check in enumerate(block.checks, start=1):
        outcome = (_metric(check, source, moment) if isinstance(check, MetricCheck)
                   else read_probe(check.probe, allowlist, timeout_s))
        if not block.listed:
            return outcome
        if not outcome.passed:
            before = f" ({'; '.join(held)})" if held else ""
            return replace(outcome, reason=f"check {number} of {count}: {outcome.reason}{before}")
        held.append(f"check {number} of {count} holds: {outcome.reason}")
    if count == 1:
        return VerifyOutcome("held", f"the check passed: {held[0].split(': ', 1)[1]}")
    readings = "; ".join(said.split(": ", 1)[1] for said in held)
    return VerifyOutcome("held", f"all {count} checks passed: {readings}")


def _refused_probes(block: VerifyBlock, allowlist: UrlAllowList) -> VerifyOutcome | None:
    """A probe the verifier may never call makes the block unjudgeable before any reading."""
    for check in block.checks:
        if isinstance(check, ProbeCheck):
            _url, problem = probe_url(check.probe, allowlist)
            if problem is not None:
                return cannot(problem)
    return None


def _metric(check: MetricCheck, source: MetricSource, moment: Moment) -> VerifyOutcome:
    window_s = check.window_s(moment.scale)
    if window_s and moment.elapsed_s() < window_s:
        return _waiting(check, source, moment, window_s)
    window = f" over {window_s:g}s" if window_s else ""
    observed: float | None = None
    bounds: tuple[tuple[str, float | None, Worst], ...] = (
        ("below", check.below, "max"), ("above", check.above, "min"))
    for bound, limit, worst in bounds:
        if limit is None:
            continue
        try:
            observed = source.read(check.metric, over_s=window_s or None, worst=worst,
                                   at=moment.at)
        except QueryRefused as exc:
            return cannot(f"{check.metric}: {exc.reason}")
        except EvidenceMissing as exc:
            return VerifyOutcome("pending", f"{check.metric}: {exc.reason}",
                                 waiting_for=check.condition(moment.scale),
                                 timed_out=isinstance(exc, QueryTimedOut))
        held = observed < limit if bound == "below" else observed > limit
        if not held:
            return VerifyOutcome(
                "pending", f"{check.metric} = {observed:g}{window}, not {bound} {limit:g}",
                observed, check.condition(moment.scale))
    return VerifyOutcome("held", f"{check.metric} = {observed:g}{window}, {check.bounds()}",
                         observed)


def _waiting(check: MetricCheck, source: MetricSource, moment: Moment,
             window_s: float) -> VerifyOutcome:
    """Before the window after the change has passed: the value now, as news, not a verdict."""
    elapsed = max(0.0, moment.elapsed_s())
    shown = f"{elapsed:.0f}" if window_s >= 10 else f"{elapsed:.1f}"  # the demo's short windows
    waiting = f"waiting ({shown}s of the {window_s:g}s window after the change)"
    worst: Worst = "max" if check.below is not None else "min"
    timed_out = False
    try:
        observed: float | None = source.read(check.metric, worst=worst, at=moment.at)
    except QueryRefused as exc:
        return cannot(f"{check.metric}: {exc.reason}")
    except EvidenceMissing as exc:
        observed, now, timed_out = None, exc.reason, isinstance(exc, QueryTimedOut)
    else:
        now = f"= {observed:g} now"
    return VerifyOutcome("pending", f"{check.metric} {now}, {waiting}", observed,
                         check.condition(moment.scale), timed_out=timed_out)
