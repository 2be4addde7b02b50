"""The interim ``opsgate demo``: walks one case through its whole life over the REST API, in
process, and prints each request and then the case's timeline. Later issues replace it with the
bot and the Slack sandbox.

On the way it shows what the case service promises: a replayed Idempotency-Key gets the same
bytes, an illegal event is 409, a stale If-Match is 412, and an incomplete plan is refused by the
guard with 422 and exactly one timeline row.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

import httpx

from core.api import create_api
from core.bootstrap import App

INCOMPLETE_PLAN: dict[str, Any] = {
    "title": "restart it and hope",
    "steps": [{"action": "script.exec", "params": {"script": "restart-service"}}],
}
"""A plan the ``plan_ready`` guard must refuse: a step without timeout_s/retry, no rollback, no
verify."""


class DemoFailed(Exception):
    """A step of the demo did not get the reply the case service promises."""


@dataclass
class Walk:
    """One case's walk: sends requests, checks each status, prints one line per request."""

    client: httpx.AsyncClient
    out: TextIO
    auth: dict[str, str]
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    requests: int = 0
    case_id: str = ""

    async def call(self, title: str, method: str, path: str, expect: int, *,
                   body: dict[str, Any] | None = None, key: str | None = None,
                   if_match: int | None = None,
                   describe: Callable[[httpx.Response], str] | None = None) -> httpx.Response:
        headers = dict(self.auth)
        if key is not None:
            # Unique per run: the demo's SQLite file keeps the keys of earlier runs.
            headers["Idempotency-Key"] = f"demo-{self.run}-{key}"
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        response = await self.client.request(method, path.format(id=self.case_id), json=body,
                                             headers=headers)
        self.requests += 1
        summary = (describe or _summary)(response)
        print(f"{self.requests:>2}. {title:<34} {method:<5} {path:<26} "
              f"{response.status_code}  {summary}", file=self.out, flush=True)
        if response.status_code != expect:
            raise DemoFailed(f"step {self.requests} ({title}): expected {expect}, "
                             f"got {response.status_code}: {response.text[:300]}")
        return response


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
    """Walk one case from NEW to CLOSED through the API built over ``app``."""
    asyncio.run(_walk(app, out))


async def _walk(app: App, out: TextIO) -> None:
    started = time.perf_counter()
    token = app.settings.api_token
    auth = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
    transport = httpx.ASGITransport(app=create_api(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://opsgate.demo") as client:
        walk = Walk(client, out, auth)
        print(f"opsgate demo: one case through its whole life over the REST API "
              f"(run {walk.run})", file=out, flush=True)
        await _open(walk)
        await _analyse(walk)
        plan_hash = await _plan(walk)
        await _approve_and_run(walk, plan_hash)
        timeline = (await walk.call("read the timeline", "GET", "/case/{id}/timeline",
                                    200)).json()
    print(file=out)
    print(timeline_table(timeline["data"]), file=out)
    elapsed = time.perf_counter() - started
    print(f"\ncase {walk.case_id} CLOSED after {walk.requests} requests in {elapsed:.2f} s",
          file=out, flush=True)


async def _open(walk: Walk) -> None:
    body = {"title": "checkout p95 latency over 2 s", "severity": "SEV2", "actor": "pagerduty"}
    first = await walk.call("open a case", "POST", "/case/create", 201, body=body, key="open")
    walk.case_id = first.json()["data"]["case_id"]

    def replayed(again: httpx.Response) -> str:
        same = "the same" if again.content == first.content else "DIFFERENT"
        return f"replayed: {same} {len(again.content)} bytes"

    again = await walk.call("same Idempotency-Key again", "POST", "/case/create", 201,
                            body=body, key="open", describe=replayed)
    if again.content != first.content:
        raise DemoFailed("a replayed Idempotency-Key did not return the first reply's bytes")


async def _move(walk: Walk, title: str, event: str, actor: str, expect: int = 200,
          **extra: Any) -> httpx.Response:
    if_match = extra.pop("if_match", None)
    return await walk.call(title, "PATCH", "/case/{id}/transition", expect,
                     body={"event": event, "actor": actor, **extra},
                     key=f"{event}-{walk.requests}", if_match=if_match)


async def _analyse(walk: Walk) -> None:
    await _move(walk, 'start analysis (If-Match: "0")', "start_analysis", "agent", if_match=0)
    await _move(walk, "illegal: exec_done while ANALYZING", "exec_done", "agent", expect=409)
    await _move(walk, 'stale If-Match: "0"', "analysis_done", "agent", expect=412, if_match=0)
    await _move(walk, 'analysis done (If-Match: "1")', "analysis_done", "agent", if_match=1)


async def _plan(walk: Walk) -> str:
    before = len(await _timeline(walk))
    await _move(walk, "plan_ready with an incomplete plan", "plan_ready", "agent", expect=422,
          plan=INCOMPLETE_PLAN)
    after = await _timeline(walk)
    if len(after) != before + 1 or after[-1]["meta"]["outcome"] != "refused":
        raise DemoFailed("a guard refusal must add exactly one timeline row")
    print(f"    the refusal added one timeline row: {len(after[-1]['meta']['problems'])} "
          "problems recorded, status and version unchanged", file=walk.out, flush=True)
    generated = await walk.call("generate plan k8s.rollout.canary", "POST", "/plan/generate", 200,
                          body={"case_id": walk.case_id, "template": "k8s.rollout.canary",
                                "actor": "planner"}, key="plan")
    plan_hash: str = generated.json()["data"]["plan_hash"]
    return plan_hash


async def _approve_and_run(walk: Walk, plan_hash: str) -> None:
    await _move(walk, "approve that exact plan", "gate_approved", "alice", plan_hash=plan_hash,
          reason="canary looks safe")
    await _move(walk, "execution done", "exec_done", "executor")
    await _move(walk, "verification passed", "verify_pass", "verifier")
    case = await walk.call("read the case", "GET", "/case/{id}", 200)
    print(f"    ETag {case.headers['etag']}: the version to send in If-Match",
          file=walk.out, flush=True)


async def _timeline(walk: Walk) -> list[dict[str, Any]]:
    response = await walk.client.get(f"/case/{walk.case_id}/timeline")
    rows: list[dict[str, Any]] = response.json()["data"]
    return rows


def timeline_table(rows: list[dict[str, Any]]) -> str:
    """The timeline as a fixed-width table: time, event, from -> to, actor, outcome."""
    header = ("time", "event", "from -> to", "actor", "outcome")
    lines = [header] + [_timeline_line(row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                .rstrip() for line in lines]
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(rendered)


def _timeline_line(row: dict[str, Any]) -> tuple[str, str, str, str, str]:
    meta = row["meta"]
    moment = datetime.fromisoformat(row["created_at"]).strftime("%H:%M:%S.%f")[:-3]
    move = f"{meta.get('from') or '-'} -> {meta.get('to') or '-'}"
    outcome = str(meta.get("outcome", ""))
    if outcome == "refused":
        outcome += f" ({len(meta.get('problems', []))} problems)"
    if "plan_hash" in meta:
        outcome += f" (plan {str(meta['plan_hash'])[:12]})"
    return moment, row["event"], move, row["actor"], outcome
