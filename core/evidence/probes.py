"""A probe check: one GET of an allow-listed URL, held when the status is the expected one; a
URL the verifier may never call makes the block unjudgeable."""

from __future__ import annotations

import httpx

from core.domain.verify import ProbeCheck, ProbeTarget
from core.evidence.outcome import VerifyOutcome, cannot
from core.outbound.allowlists import UrlAllowList, url_problem
from core.outbound.http import RedirectRefused, is_expected, send

_PROBE_BODY_LIMIT = 4096


def probe_url(target: ProbeTarget, allowlist: UrlAllowList) -> tuple[httpx.URL | None,
                                                                     str | None]:
    """The probe's URL, or None and why it is refused (not a URL, unsafe, not allow-listed)."""
    try:
        url = httpx.URL(target.url)
    except httpx.InvalidURL as exc:
        return None, f"probe url {target.url!r} is not a URL: {exc}"
    problem = url_problem(url)
    if problem or not allowlist.allows(url):
        why = problem or "not on the http allow-list (OPSGATE_HTTP_ALLOWLIST)"
        return None, f"probe url {target.url} refused: {why}"
    return url, None


def read_probe(target: ProbeTarget, allowlist: UrlAllowList, timeout_s: float) -> VerifyOutcome:
    """One reading of the probe: held on the expected status, pending on any other answer or
    none."""
    url, problem = probe_url(target, allowlist)
    if url is None:
        return cannot(problem or "probe url refused")
    condition = ProbeCheck(probe=target).condition()
    try:
        reply = send("GET", url, allowed=allowlist.allows, timeout_s=timeout_s,
                     body_limit=_PROBE_BODY_LIMIT)
    except RedirectRefused as exc:
        return VerifyOutcome("pending", f"probe {target.url}: {exc}", waiting_for=condition)
    except httpx.HTTPError as exc:
        return VerifyOutcome("pending", f"probe {target.url}: {type(exc).__name__}: {exc}",
                             waiting_for=condition)
    passed = is_expected(reply.status, target.expect_status)
    verdict = "as expected" if passed else "not expected"
    return VerifyOutcome("held" if passed else "pending",
                         f"probe {target.url} → {reply.status} ({verdict})",
                         float(reply.status), None if passed else condition)
