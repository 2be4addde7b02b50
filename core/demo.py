"""``opsgate demo --walk``: one case through its whole life on the embedded default, scripted.
The case is opened over the REST API (in process); the in-process loop's consumers then move it
(intake, analyst, planner, gatekeeper, executor, verifier); a person steps in only at the gate.
``opsgate demo`` without ``--walk`` runs the product with the Slack sandbox page instead
(``bot/sandbox/demo.py``, which registers the command).

On the way it shows what the case service promises: a replayed Idempotency-Key gets the same
bytes, an illegal event is 409, an approval sent as a transition is 403, a stale If-Match is 412,
and a refused approval (the requester approving their own plan) is 422 with exactly one timeline
row. The two people are API principals made for the run (``core.principals``), revoked at its end.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TextIO

import httpx

from core import principals
from core.api import create_api
from core.bootstrap import App
from core.cases.timeline import Entry, entries_of
from core.errors import OpsgateError
from core.loop import InProcessLoop
from core.settings import Settings

REQUESTER = "U0RILEY"
"""Who opens the case (a person, by their Slack id): the planner proposes plans on their behalf,
so they may not approve."""
APPROVER = "U0ALICE"
WATCH_TIMEOUT_S = 30.0
WATCH_EVERY_S = 0.01
DEMO_VERIFY_TIME_SCALE = 0.01
"""The demo's verification clock: a plan's 300 s window after the change takes 3 s."""
DEMO_VERIFY_POLL_S = 0.5
DEMO_METRICS_BEFORE_CHANGE = {"http_5xx_ratio": 0.12, "error_rate": 0.12,
                              "latency_p95_ms": 2400.0}
"""The demo's stand-in world during the incident: what its metrics read until the approved
change has settled (``core.evidence.stand_in.StaticSource``)."""
DEMO_METRICS_AFTER_CHANGE = {"http_5xx_ratio": 0.001, "error_rate": 0.001,
                             "latency_p95_ms": 120.0, "standby_saturation": 0.3}
"""... and once it has: the template plans' checks hold (the standby is not part of the
incident, so it reads the same before)."""


def demo_verification(settings: Settings) -> Settings:
    """``settings`` with the demo's verification clock, unless the environment sets its own
    (``OPSGATE_VERIFY_TIME_SCALE``, ``OPSGATE_VERIFY_POLL_S``), and, with neither Prometheus nor
    a stand-in table configured, the demo's stand-in metrics, which react to the approved
    change: bad before it, good after. Against a real Prometheus (``OPSGATE_PROMETHEUS_URL``)
    windows keep their length: its samples are seconds apart, so a window of a few seconds would
    hold no data."""
    chosen = settings.model_fields_set
    update: dict[str, object] = {}
    if not settings.prometheus_url and not settings.static_metrics:
        update["static_metrics"] = DEMO_METRICS_AFTER_CHANGE
        update["static_metrics_before_change"] = DEMO_METRICS_BEFORE_CHANGE
    if "verify_time_scale" not in chosen and not settings.prometheus_url:
        update["verify_time_scale"] = DEMO_VERIFY_TIME_SCALE
    if "verify_poll_s" not in chosen and not settings.prometheus_url:
        update["verify_poll_s"] = DEMO_VERIFY_POLL_S
    return settings.model_copy(update=update)


def demo_approvers(settings: Settings) -> Settings:
    """``settings`` with the walk's approver named (alice): outside a demo nobody approves until
    ``OPSGATE_APPROVERS`` names someone."""
    return settings.model_copy(update={"approvers": [APPROVER]})


class DemoFailed(OpsgateError):
    """A step of the demo did not get the reply the case service promises."""

    code = "demo_failed"


@dataclass
class Walk:
    """One case's walk: sends requests, checks each status, prints one line per request, and
    prints the timeline rows the consumers add while it watches."""

    client: httpx.AsyncClient
    out: TextIO
    tokens: dict[str, str]  # the bearer token of each person, by Slack id
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    requests: int = 0
    case_id: str = ""
    shown_rows: int = 0
    moves_by_consumers: int = 0

    async def call(self, title: str, method: str, path: str, expect: int, *,
                   body: dict[str, Any] | None = None, key: str | None = None,
                   if_match: int | None = None, by: str = REQUESTER,
                   describe: Callable[[httpx.Response], str] | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[by]}"}
        if key is not None:
            # Unique per run: the demo's SQLite file keeps the keys of earlier runs.
            headers["Idempotency-Key"] = f"demo-{self.run}-{key}"
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        response = await self.client.request(method, path.format(id=self.case_id), json=body,
                                             headers=headers)
        self.requests += 1
        summary = (describe or _summary)(response)
        print(f"{self.requests:>2}. {title:<38} {method:<5} {path:<24} "
              f"{response.status_code}  {summary}", file=self.out, flush=True)
        if response.status_code != expect:
            raise DemoFailed(f"step {self.requests} ({title}): expected {expect}, "
                             f"got {response.status_code}: {response.text[:300]}")
        return response

    async def timeline(self) -> tuple[Entry, ...]:
        response = await self.client.get(f"/case/{self.case_id}/timeline", headers={
            "Authorization": f"Bearer {self.tokens[REQUESTER]}"})
        return entries_of(response.json()["data"])

    async def watch(self, until: Callable[[Sequence[Entry]], bool], what: str) -> None:
        """Print the timeline rows the consumers add until ``until(rows)`` holds."""
        deadline = time.monotonic() + WATCH_TIMEOUT_S
        while True:
            rows = await self.timeline()
            for entry in rows[self.shown_rows:]:
                self._show(entry)
            self.shown_rows = len(rows)
            if until(rows):
                return
            if time.monotonic() > deadline:
                raise DemoFailed(f"the consumers did not {what} within {WATCH_TIMEOUT_S:.0f} s")
            await asyncio.sleep(WATCH_EVERY_S)

    def _show(self, entry: Entry) -> None:
        by_consumer = entry.actor not in (REQUESTER, APPROVER)  # the loop's, or the agent's
        if entry.accepted:
            self.moves_by_consumers += by_consumer
            what = f"{entry.source} -> {entry.target} v{entry.version}"
        else:
            what = entry.outcome or ""
        reason = f"  {entry.reason}" if entry.reason else ""
        who = "loop" if by_consumer else "hand"
        print(f"    {who}: {entry.actor:<10} {entry.event:<17} {what}{reason}"[:150],
              file=self.out, flush=True)


def _summary(response: httpx.Response) -> str:
    body = response.json()
    if "error" in body:
        return f"{body['error']['code']}: {body['error']['message']}"
    data = body["data"]
    if isinstance(data, list):
        return f"{len(data)} rows"
    summary = f"{data['status']} v{data['version']}"
    if "plan_hash" in data:
        summary += f"  plan {data['plan_hash'][:12]}..."
    return summary


def run_demo(app: App, out: TextIO) -> None:
    """Open one case through the API built over ``app`` and let the in-process loop close it
    (on the demo's verification clock: ``demo_verification``)."""
    app = replace(app, settings=demo_verification(app.settings))
    with InProcessLoop(app):
        asyncio.run(_walk(app, out))


async def _walk(app: App, out: TextIO) -> None:
    started = time.perf_counter()
    run = uuid.uuid4().hex[:8]
    people = {REQUESTER: f"demo-riley-{run}", APPROVER: f"demo-alice-{run}"}
    tokens = {person: principals.create(app.engine, name, "approver", person)[1]
              for person, name in people.items()}
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_api(app)),
                               base_url="http://localhost")
    try:
        await _walk_as(Walk(client, out, tokens, run), started)
    finally:
        for name in people.values():
            principals.revoke(app.engine, name)


async def _walk_as(walk: Walk, started: float) -> None:
    out = walk.out
    async with walk.client:
        print(f"opsgate demo: one case through its whole life; the consumers move it, a person "
              f"approves (run {walk.run})", file=out, flush=True)
        print(f"    API principals for this run (revoked at its end): demo-riley-{walk.run} "
              f"(Slack {REQUESTER}) opens the case, demo-alice-{walk.run} (Slack {APPROVER}) "
              "approves", file=out, flush=True)
        await _open(walk)
        await walk.watch(_at_the_gate, "bring the case to the gate")
        if _waiting_for_a_person(await walk.timeline()):
            await _refusals(walk)
            await _approve(walk)
        else:
            print("    the gatekeeper approved the plan itself (OPSGATE_AUTO_APPROVE)",
                  file=out, flush=True)
        await walk.watch(_ended, "end the case")
        case = await walk.call("read the case", "GET", "/case/{id}", 200)
        print(f"    ETag {case.headers['etag']}: the version to send in If-Match",
              file=out, flush=True)
        timeline = (await walk.call("read the timeline", "GET", "/case/{id}/timeline",
                                    200)).json()
    print(file=out)
    print(timeline_table(entries_of(timeline["data"])), file=out)
    status = case.json()["data"]["status"]
    elapsed = time.perf_counter() - started
    print(f"\ncase {walk.case_id} {status} in {elapsed:.2f} s: {walk.moves_by_consumers} moves "
          f"by the consumers, {walk.requests} requests by hand", file=out, flush=True)
    if status != "CLOSED":
        raise DemoFailed(f"the case ended {status}, not CLOSED")


async def _open(walk: Walk) -> None:
    body = {"title": "checkout p95 latency over 2 s", "severity": "SEV2"}
    first = await walk.call("open a case", "POST", "/case/create", 201, body=body, key="open")
    walk.case_id = first.json()["data"]["case_id"]

    def replayed(again: httpx.Response) -> str:
        same = "the same" if again.content == first.content else "DIFFERENT"
        return f"replayed: {same} {len(again.content)} bytes"

    again = await walk.call("same Idempotency-Key again", "POST", "/case/create", 201,
                            body=body, key="open", describe=replayed)
    if again.content != first.content:
        raise DemoFailed("a replayed Idempotency-Key did not return the first reply's bytes")


def _at_the_gate(rows: Sequence[Entry]) -> bool:
    """The gatekeeper has spoken: it noted who must approve, or approved itself."""
    return any(entry.event in ("awaiting_approval", "gate_approved", "gate_rejected")
               for entry in rows)


def _waiting_for_a_person(rows: Sequence[Entry]) -> bool:
    return rows[-1].event == "awaiting_approval"


def _ended(rows: Sequence[Entry]) -> bool:
    return rows[-1].target in ("CLOSED", "PARKED") and rows[-1].accepted


async def _plan_hash(walk: Walk) -> str:
    for entry in reversed(await walk.timeline()):
        if entry.event == "plan_ready" and entry.plan_hash is not None:
            return entry.plan_hash
    raise DemoFailed("the planner's plan_ready row has no plan hash")


async def _move(walk: Walk, title: str, event: str, expect: int, **extra: Any
                ) -> httpx.Response:
    return await walk.call(title, "PATCH", "/case/{id}/transition", expect,
                           body={"event": event, **extra}, key=f"{event}-{walk.requests}")


async def _decide(walk: Walk, title: str, by: str, expect: int = 200,
                  if_match: int | None = None) -> httpx.Response:
    return await walk.call(title, "POST", "/case/{id}/approve", expect,
                           body={"plan_hash": await _plan_hash(walk)},
                           key=f"approve-{walk.requests}", if_match=if_match, by=by)


async def _refusals(walk: Walk) -> None:
    await _move(walk, "illegal: exec_done while WAIT_GATE", "exec_done", expect=409)
    await _move(walk, "gate_approved as a transition", "gate_approved", expect=403,
                plan_hash=await _plan_hash(walk))
    await _decide(walk, 'stale If-Match: "0"', APPROVER, expect=412, if_match=0)
    before = len(await walk.timeline())
    await _decide(walk, "the requester approves own plan", REQUESTER, expect=422)
    after = await walk.timeline()
    if len(after) != before + 1 or after[-1].outcome != "refused":
        raise DemoFailed("a refused approval must add exactly one timeline row")
    await walk.watch(lambda _rows: True, "show the refusal")
    print("    the refusal added one timeline row; status and version unchanged",
          file=walk.out, flush=True)


async def _approve(walk: Walk) -> None:
    await _decide(walk, f"{APPROVER} approves that exact plan", APPROVER)


def timeline_table(rows: Sequence[Entry]) -> str:
    """The timeline as a fixed-width table: time, event, from -> to, actor, outcome."""
    header = ("time", "event", "from -> to", "actor", "outcome")
    lines = [header] + [_timeline_line(entry) for entry in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                .rstrip() for line in lines]
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(rendered)


def _timeline_line(entry: Entry) -> tuple[str, str, str, str, str]:
    moment = datetime.fromisoformat(str(entry.at)).strftime("%H:%M:%S.%f")[:-3]
    move = "-" if entry.noted else f"{entry.source or '-'} -> {entry.target or '-'}"
    outcome = entry.outcome or ""
    if outcome == "refused":
        outcome += f" ({len(entry.problems)} problems)"
    if entry.plan_hash is not None:
        outcome += f" (plan {entry.plan_hash[:12]})"
    return moment, entry.event, move, entry.shown_actor, outcome
