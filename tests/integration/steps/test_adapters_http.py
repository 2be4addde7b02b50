"""http.request and gateway.flip against real HTTP servers on 127.0.0.1 that count requests by
Idempotency-Key: the key arrives, statuses decide the outcome, redirects stay on their host,
bodies and waits are bounded."""

from __future__ import annotations

import json
import time

import pytest

from core.outbound.allowlists import UrlAllowList
from core.settings import InvalidSettings, Settings
from core.steps.adapters import StepContext, StepRefused, adapters_from_settings
from core.steps.adapters.gateway_flip import GatewayFlipAdapter
from core.steps.adapters.http import HttpRequestAdapter
from tests.support.local_http import Reply, local_server


def ctx(step_index: int = 0, attempt: int = 1, timeout_s: float = 2.0) -> StepContext:
    return StepContext.for_step("case-7", "plan-hash", step_index, attempt, timeout_s)


def http_adapter(*prefixes: str) -> HttpRequestAdapter:
    return HttpRequestAdapter(UrlAllowList(prefixes), 4096)


@pytest.fixture
def server():
    with local_server({"/orders": Reply(201, b'{"id": 1}'), "/boom": Reply(503, b"down"),
                       "/conflict": Reply(409, b"exists")}) as srv:
        yield srv


def test_the_steps_idempotency_key_arrives_downstream_with_the_body(server):
    adapter = http_adapter(server.url("/"))
    outcome = adapter.run({"method": "POST", "url": server.url("/orders"),
                           "json": {"sku": "A-1", "qty": 2},
                           "headers": {"X-Opsgate-Case": "case-7"}}, ctx())
    assert outcome.ok, outcome.summary
    assert outcome.detail["status"] == 201 and outcome.output == '{"id": 1}'
    [seen] = server.seen
    assert seen.method == "POST" and json.loads(seen.body) == {"sku": "A-1", "qty": 2}
    assert seen.headers["idempotency-key"] == ctx().idempotency_key
    assert seen.headers["x-opsgate-case"] == "case-7"
    assert server.keys() == {ctx().idempotency_key: 1}


def test_each_step_and_attempt_sends_its_own_key(server):
    adapter = http_adapter(server.url("/"))
    for step_index, attempt in ((0, 1), (0, 2), (1, 1), (0, 1)):
        adapter.run({"method": "PUT", "url": server.url("/orders")}, ctx(step_index, attempt))
    assert server.keys() == {ctx(0, 1).idempotency_key: 2, ctx(0, 2).idempotency_key: 1,
                             ctx(1, 1).idempotency_key: 1}


def test_the_status_decides_the_outcome(server):
    adapter = http_adapter(server.url("/"))
    down = adapter.run({"method": "POST", "url": server.url("/boom")}, ctx())
    assert not down.ok and down.detail["status"] == 503 and "not expected" in down.summary
    conflict = {"method": "POST", "url": server.url("/conflict")}
    assert not adapter.run(conflict, ctx()).ok
    assert adapter.run({**conflict, "expect_status": [201, 409]}, ctx()).ok
    assert not adapter.run({"method": "POST", "url": server.url("/orders"),
                            "expect_status": [200]}, ctx()).ok


def test_a_url_off_the_allow_list_is_refused_and_never_called(server):
    adapter = http_adapter(server.url("/orders"))
    for url in (server.url("/boom"), server.url("/orders/../boom"),
                server.url("/orders/%2e%2e/boom")):
        with pytest.raises(StepRefused):
            adapter.run({"method": "DELETE", "url": url}, ctx())
    with pytest.raises(StepRefused, match="not on the http allow-list"):
        http_adapter().run({"method": "GET", "url": server.url("/orders")}, ctx())
    assert server.seen == []


def test_a_redirect_on_the_same_host_and_allow_list_is_followed_with_the_key(server):
    server.routes["/old"] = Reply(307, b"", {"Location": "/orders"})
    outcome = http_adapter(server.url("/")).run({"method": "POST", "url": server.url("/old"),
                                                 "json": {"n": 1}}, ctx())
    assert outcome.ok and outcome.detail["url"] == server.url("/orders")
    assert [s.path for s in server.seen] == ["/old", "/orders"]
    assert server.keys() == {ctx().idempotency_key: 2}
    assert json.loads(server.seen[1].body) == {"n": 1}


def test_a_redirect_to_another_host_is_refused(server):
    with local_server({"/steal": Reply(200, b"gotcha")}) as elsewhere:
        server.routes["/away"] = Reply(302, b"", {"Location": elsewhere.url("/steal")})
        both = http_adapter(server.url("/"), elsewhere.url("/"))
        outcome = both.run({"method": "GET", "url": server.url("/away")}, ctx())
        assert not outcome.ok and "leaves the original host" in outcome.summary
        assert outcome.detail["refused_redirect"] == elsewhere.url("/steal")
        assert elsewhere.seen == []


def test_a_redirect_off_the_allow_list_on_the_same_host_is_refused(server):
    server.routes["/api/old"] = Reply(308, b"", {"Location": "/admin"})
    outcome = http_adapter(server.url("/api/")).run(
        {"method": "POST", "url": server.url("/api/old")}, ctx())
    assert not outcome.ok and "not on the allow-list" in outcome.summary
    assert [s.path for s in server.seen] == ["/api/old"]


def test_the_body_read_is_bounded(server):
    server.routes["/huge"] = Reply(200, b"x" * 1_000_000)
    outcome = http_adapter(server.url("/")).run({"method": "GET", "url": server.url("/huge")},
                                                ctx())
    assert outcome.ok and outcome.detail["body_truncated"]
    assert len(outcome.output) < 4200 and "bytes truncated]" in outcome.output


def test_a_slow_server_fails_the_step_at_its_timeout(server):
    server.routes["/slow"] = Reply(200, b"late", delay_s=3.0)
    started = time.monotonic()
    outcome = http_adapter(server.url("/")).run({"method": "GET", "url": server.url("/slow")},
                                                ctx(timeout_s=0.5))
    assert not outcome.ok and outcome.detail == {"timed_out": True}
    assert time.monotonic() - started < 2.5


def test_an_unreachable_server_is_a_failed_outcome(server):
    dead = "http://127.0.0.1:9/"  # discard port: nothing listens
    outcome = http_adapter(dead).run({"method": "GET", "url": dead}, ctx())
    assert not outcome.ok and outcome.detail["error"] == "ConnectError"


def test_proxy_settings_in_the_environment_are_ignored(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    outcome = http_adapter(server.url("/")).run({"method": "GET", "url": server.url("/orders")},
                                                ctx())
    assert outcome.ok and len(server.seen) == 1


def test_gateway_flip_posts_to_the_admin_url_with_the_key():
    with local_server({"/admin/flip": Reply(200, b'{"flipped": true}')}) as gateway:
        settings = Settings(_env_file=None, traffic_gateway_url=gateway.url("/admin/flip"))
        flip = adapters_from_settings(settings)["gateway.flip"]
        outcome = flip.run({"route": "default", "from": "primary", "to": "standby",
                            "weight": 100}, ctx())
        assert outcome.ok, outcome.summary
        [seen] = gateway.seen
        assert (seen.method, seen.path) == ("POST", "/admin/flip")
        assert json.loads(seen.body) == {"route": "default", "from": "primary",
                                         "to": "standby", "weight": 100}
        assert gateway.keys() == {ctx().idempotency_key: 1}


def test_gateway_flip_failures_and_redirects():
    with local_server({"/flip": Reply(500, b"no backend standby")}) as gateway, \
            local_server() as elsewhere:
        flip = GatewayFlipAdapter(gateway.url("/flip"), 4096)
        failed = flip.run({"route": "default", "to": "standby"}, ctx())
        assert not failed.ok and failed.detail["status"] == 500
        assert failed.output == "no backend standby"
        gateway.routes["/flip"] = Reply(307, b"", {"Location": elsewhere.url("/flip")})
        assert not flip.run({"route": "default", "to": "standby"}, ctx()).ok
        assert elsewhere.seen == []


# -- what a step shows: never credentials, never an unexpected exception --------------------


def test_a_redirect_carrying_credentials_is_refused_and_shown_without_them(server):
    with local_server({"/steal": Reply(200, b"gotcha")}) as elsewhere:
        target = elsewhere.url("/steal").replace("http://", "http://admin:s3cret@")
        server.routes["/away"] = Reply(302, b"", {"Location": target})
        outcome = http_adapter(server.url("/")).run(
            {"method": "GET", "url": server.url("/away")}, ctx())
        assert not outcome.ok and "refused" in outcome.summary
        assert "s3cret" not in json.dumps([outcome.summary, outcome.detail])
        assert outcome.detail["refused_redirect"] == elsewhere.url("/steal")
        assert elsewhere.seen == []


def test_a_url_with_credentials_is_refused_without_repeating_them(server):
    url = server.url("/orders").replace("http://", "http://admin:s3cret@")
    with pytest.raises(StepRefused) as refused:
        http_adapter(server.url("/")).run({"method": "GET", "url": url}, ctx())
    assert "credentials in the URL are not allowed" in refused.value.message
    assert "s3cret" not in json.dumps([refused.value.message, refused.value.details])
    assert server.seen == []


def test_a_traffic_gateway_url_with_credentials_stops_the_start_in_one_line():
    with pytest.raises(InvalidSettings) as bad:
        GatewayFlipAdapter("http://admin:s3cret@127.0.0.1:9/flip", 4096)
    [line] = bad.value.problems
    assert line.startswith("OPSGATE_TRAFFIC_GATEWAY_URL=http://127.0.0.1:9/flip: ")
    assert "s3cret" not in line and "expected" in line


@pytest.mark.parametrize("value", ["a\u0085b", "x\x0by"])
def test_a_header_value_that_cannot_be_sent_is_a_refusal_and_nothing_is_sent(server, value):
    with pytest.raises(StepRefused, match=r"headers\.X-Note"):
        http_adapter(server.url("/")).run({"method": "POST", "url": server.url("/orders"),
                                           "headers": {"X-Note": value}}, ctx())
    assert server.seen == []
