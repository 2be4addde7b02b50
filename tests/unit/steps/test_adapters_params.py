"""Every adapter validates its params before anything runs: what is refused, and the exact
kubectl argv built from what is accepted."""

from __future__ import annotations

import pytest

from core.outbound.allowlists import ExecutableAllowList, UrlAllowList
from core.settings import InvalidSettings
from core.steps.adapters import StepContext, StepRefused
from core.steps.adapters.base import parse_params
from core.steps.adapters.gateway_flip import FlipParams, GatewayFlipAdapter
from core.steps.adapters.http import HttpParams, HttpRequestAdapter
from core.steps.adapters.k8s import RolloutParams, change_argv, status_argv
from core.steps.adapters.script import ScriptAdapter, ScriptParams

CTX = StepContext.for_step("case", "hash", 0, 1, 1.0)


def rollout(**params):
    return parse_params(RolloutParams, {"deployment": "checkout", "namespace": "prod", **params},
                        "k8s.rollout")


def test_restart_builds_exactly_this_argv():
    p = rollout(operation="restart")
    assert change_argv("/k", p) == ["/k", "-n", "prod", "rollout", "restart", "deployment/checkout"]
    assert status_argv("/k", p, 42) == ["/k", "-n", "prod", "rollout", "status",
                                         "deployment/checkout", "--timeout=42s"]


def test_undo_builds_exactly_this_argv():
    assert change_argv("/k", rollout(operation="undo")) == [
        "/k", "-n", "prod", "rollout", "undo", "deployment/checkout"]
    assert change_argv("/k", rollout(operation="undo", to_revision=7))[-1] == "--to-revision=7"


def test_set_image_builds_exactly_this_argv():
    image = "registry.example.com:5000/shop/checkout:v1.2.3@sha256:" + "a" * 64
    p = rollout(operation="set-image", container="app", image=image)
    assert change_argv("/k", p) == ["/k", "-n", "prod", "set", "image", "deployment/checkout",
                                    f"app={image}"]


@pytest.mark.parametrize("params", [
    {"namespace": "--kubeconfig=/tmp/evil"},
    {"namespace": "Prod"},
    {"namespace": "a" * 64},
    {"deployment": "checkout; rm -rf /"},
    {"deployment": "-checkout"},
    {"deployment": "checkout/../x"},
    {"operation": "delete"},
    {"operation": "set-image", "container": "app", "image": "--record"},
    {"operation": "set-image", "container": "app", "image": "nginx latest"},
    {"operation": "set-image", "container": "app", "image": "nginx:$(id)"},
    {"operation": "set-image", "container": "App_1", "image": "nginx"},
    {"operation": "set-image", "image": "nginx"},
    {"operation": "restart", "image": "nginx"},
    {"operation": "restart", "to_revision": 3},
    {"operation": "undo", "to_revision": 0},
    {"operation": "undo", "to_revision": "3"},
    {"operation": "restart", "strategy": "canary"},
])
def test_bad_k8s_params_are_refused(params):
    with pytest.raises(StepRefused, match=r"k8s\.rollout: invalid params"):
        rollout(**{"operation": "restart", **params})


@pytest.mark.parametrize(("params", "problem"), [
    ({"argv": []}, "argv"),
    ({"argv": [""]}, "argv[0] must name an executable"),
    ({"argv": ["echo", "a\x00b"]}, "NUL"),
    ({"argv": "echo hi"}, "argv"),
    ({"argv": ["echo"], "cwd": "relative/dir"}, "absolute"),
    ({"argv": ["echo"], "env": {"A B": "1"}}, "env"),
    ({"argv": ["echo"], "env": {"LANG": "C\x00"}}, "NUL"),
    ({"argv": ["echo"], "shell": True}, "shell"),
])
def test_bad_script_params_are_refused(params, problem):
    with pytest.raises(StepRefused, match=r"script\.exec: invalid params") as refused:
        parse_params(ScriptParams, params, "script.exec")
    assert problem in refused.value.message


@pytest.mark.parametrize("name", [
    "HTTPS_PROXY", "https_proxy", "KUBECONFIG", "GIT_SSH_COMMAND", "PYTHONUSERBASE",
    "GLIBC_TUNABLES", "LD_PRELOAD", "PATH", "BASH_ENV", "HOME", "NODE_OPTIONS", "DRAIN",
    "SERVICE", "lang", "LC", "AWS_SECRET_ACCESS_KEY",
])
def test_script_exec_refuses_variables_off_its_environment_allow_list(name):
    adapter = ScriptAdapter(ExecutableAllowList(["echo"]), 4096,
                            env_allow=("DRAIN_SECONDS", "SERVICE_*"))
    with pytest.raises(StepRefused, match="not on the environment allow-list") as refused:
        adapter.run({"argv": ["echo"], "env": {name: "x", "TZ": "UTC"}}, CTX)
    assert refused.value.details["variables"] == [name]
    assert "OPSGATE_SCRIPT_ENV_ALLOW" in refused.value.message


def test_script_exec_lets_a_plan_set_the_locale_the_zone_and_what_the_operator_named():
    adapter = ScriptAdapter(ExecutableAllowList(["echo"]), 4096,
                            env_allow=("DRAIN_SECONDS", "SERVICE_*"))
    env = {"LANG": "C.UTF-8", "LC_ALL": "C", "LC_TIME": "C", "TZ": "UTC",
           "DRAIN_SECONDS": "30", "SERVICE_NAME": "checkout"}
    assert adapter.run({"argv": ["echo", "ok"], "env": env}, CTX).ok


def test_script_exec_refuses_everything_when_the_allow_list_is_empty():
    adapter = ScriptAdapter(ExecutableAllowList([]), 4096)
    with pytest.raises(StepRefused, match="not on the script allow-list"):
        adapter.run({"argv": ["echo", "hi"]}, CTX)


@pytest.mark.parametrize("value", ["a\u0085b", "caf\u00e9", "a\x0bb", "a\x7fb", " x", "x ",
                                   "x" * 4097, "a\nb"])
def test_http_header_values_must_be_visible_ascii_as_the_guard_says(value):
    params = {"method": "GET", "url": "http://127.0.0.1:9/", "headers": {"X-A": value}}
    with pytest.raises(StepRefused, match=r"http\.request: invalid params: headers\.X-A"):
        HttpRequestAdapter(UrlAllowList(["http://127.0.0.1:9/"]), 4096).run(params, CTX)


@pytest.mark.parametrize("params", [
    {"method": "TRACE", "url": "http://127.0.0.1/"},
    {"method": "GET"},
    {"method": "GET", "url": "http://127.0.0.1/", "headers": {"Idempotency-Key": "mine"}},
    {"method": "GET", "url": "http://127.0.0.1/", "headers": {"Host": "evil"}},
    {"method": "GET", "url": "http://127.0.0.1/", "headers": {"X-A": "1\r\nX-B: 2"}},
    {"method": "GET", "url": "http://127.0.0.1/", "expect_status": [99]},
    {"method": "GET", "url": "http://127.0.0.1/", "expect_status": []},
    {"method": "GET", "url": "http://127.0.0.1/", "follow": True},
    {"method": "POST", "url": "http://127.0.0.1/", "json": {"blob": "x" * 300_000}},
])
def test_bad_http_params_are_refused(params):
    with pytest.raises(StepRefused, match=r"http\.request: invalid params"):
        parse_params(HttpParams, params, "http.request")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8082/",  # another port
    "http://127.0.0.1:80810/x",  # a port that merely starts the same
    "http://127.0.0.1:8081@evil.example/",  # userinfo trick
    "https://127.0.0.1:8081/",  # another scheme
    "http://127.0.0.1:8081/api/%2e%2e/admin",  # an encoded dot segment
    "http://127.0.0.1:8081/api/..%2fadmin",  # an encoded slash
    "http://localhost:8081/api/",  # another host name
    "http://127.0.0.1:8081/apix",  # not on a segment boundary
    "file:///etc/passwd",
    "ftp://127.0.0.1:8081/api/",
])
def test_http_request_refuses_urls_off_the_allow_list(url):
    adapter = HttpRequestAdapter(UrlAllowList(["http://127.0.0.1:8081/api"]), 4096)
    refusal = r"^http\.request: .*(not on the http allow-list|refused: )"
    with pytest.raises(StepRefused, match=refusal):
        adapter.run({"method": "GET", "url": url}, CTX)


def test_gateway_flip_params_and_its_missing_configuration():
    parsed = parse_params(FlipParams, {"route": "default", "from": "primary", "to": "standby",
                                       "weight": 100}, "gateway.flip")
    assert parsed.model_dump(by_alias=True, exclude_none=True) == {
        "route": "default", "from": "primary", "to": "standby", "weight": 100}
    for bad in ({"route": "default", "to": "x", "weight": 101},
                {"route": "-x", "to": "standby"}, {"route": "default"},
                {"route": "default", "to": "standby", "url": "http://evil/"}):
        with pytest.raises(StepRefused, match=r"gateway\.flip: invalid params"):
            parse_params(FlipParams, bad, "gateway.flip")
    with pytest.raises(StepRefused, match="not configured"):
        GatewayFlipAdapter(None, 4096).run({"route": "default", "to": "standby"}, CTX)
    with pytest.raises(InvalidSettings, match="OPSGATE_TRAFFIC_GATEWAY_URL=not a url: "):
        GatewayFlipAdapter("not a url", 4096)
