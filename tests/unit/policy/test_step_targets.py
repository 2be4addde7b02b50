"""What each step changes, and whose it is (issue 40): Kubernetes objects through the catalog
(else the namespace it assigns), allow-list entries through the component they name; anything
else is unowned, and the case's components never stand in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from core.catalog.files import load_catalog
from core.domain.plans import StepAction, parse_plan
from core.outbound.allowlists import UrlAllowList
from core.policy.targets import StepOwners, owned_entry, plan_targets, step_components

CATALOG = load_catalog(Path(__file__).parents[3] / "docs" / "examples" / "catalog")
OWNERS = StepOwners.of(
    urls=["payments-api=https://pay.example.com/admin", "https://status.example.com/"],
    scripts=["search-api=restart-search", "echo"], routes=["payments-api=checkout"],
    mcp_servers={"tickets": "search-api", "wiki": None})


def names(action: StepAction, **params: Any) -> list[str]:
    return [c.name for c in step_components(action, params, CATALOG, OWNERS)]


@pytest.mark.parametrize(("namespace", "deployment", "owned"), [
    ("payments", "payments-api", ["payments-api"]),
    ("payments", "payments-ledger-writer", ["payments-api"]),  # the namespace's component
    ("search", "search-api", ["search-api"]),
    ("billing", "payments-ledger-writer", []),  # a namespace no component is assigned
    ("search", "payments-api", ["search-api"]),  # payments-api does not live in search
])
def test_a_rollout_is_its_deployment_else_its_namespace(namespace, deployment, owned):
    assert names(StepAction.K8S_ROLLOUT, namespace=namespace, deployment=deployment) == owned


@pytest.mark.parametrize(("url", "owned"), [
    ("https://pay.example.com/admin/refund-all", ["payments-api"]),
    ("https://pay.example.com/admin", ["payments-api"]),
    ("https://pay.example.com/administrator", []),  # not on a segment boundary
    ("https://pay.example.com:8443/admin/x", []),  # another origin
    ("http://pay.example.com/admin/x", []),
    ("https://user:pw@pay.example.com/admin/x", []),
    ("https://pay.example.com/admin/../other", []),
    ("https://status.example.com/incident", []),  # an entry naming no component
    ("https://elsewhere.example.com/", []),
])
def test_a_request_is_the_component_its_allow_list_entry_names(url, owned):
    assert names(StepAction.HTTP_REQUEST, method="POST", url=url) == owned


def test_scripts_servers_and_routes_are_their_entries_components():
    assert names(StepAction.SCRIPT_EXEC, argv=["restart-search", "--now"]) == ["search-api"]
    assert names(StepAction.SCRIPT_EXEC, argv=["echo", "hi"]) == []
    assert names(StepAction.MCP_CALL, server="tickets", tool="t") == ["search-api"]
    assert names(StepAction.MCP_CALL, server="wiki", tool="t") == []
    assert names(StepAction.GATEWAY_FLIP, route="checkout", to="b") == ["payments-api"]
    assert names(StepAction.GATEWAY_FLIP, route="search", to="b") == []


def test_a_component_the_catalog_does_not_have_owns_nothing():
    owners = StepOwners.of(urls=["ledger=https://ledger.example.com/"])
    params = {"method": "POST", "url": "https://ledger.example.com/x"}
    assert step_components(StepAction.HTTP_REQUEST, params, CATALOG, owners) == ()


def test_an_entry_names_its_component_and_the_allow_list_reads_the_entry():
    assert owned_entry("payments-api=https://pay.example.com/admin/") == (
        "payments-api", "https://pay.example.com/admin/")
    assert owned_entry("https://pay.example.com/a=b") == (None, "https://pay.example.com/a=b")
    assert owned_entry("/usr/local/bin/restart") == (None, "/usr/local/bin/restart")
    allowed = UrlAllowList(["payments-api=https://pay.example.com/admin/"])
    assert allowed.allows(httpx.URL("https://pay.example.com/admin/refund-all"))


def test_every_step_and_rollback_step_has_a_target_and_a_noop_none():
    plan = parse_plan({
        "title": "t", "risk_score": 0.1,
        "steps": [{"action": "noop", "params": {}, "timeout_s": 10, "retry": 0},
                  {"action": "http.request", "timeout_s": 10, "retry": 0,
                   "params": {"method": "POST", "url": "https://status.example.com/x"}}],
        "rollback": {"action": "k8s.rollout",
                     "params": {"operation": "undo", "namespace": "search",
                                "deployment": "search-api"}},
        "verify": {"metric": "m", "below": 1}})
    targets = plan_targets(plan, CATALOG, OWNERS)
    assert [(t.step.label, t.unowned) for t in targets] == [
        ("step 2 (http.request)", True), ("rollback step 1 (k8s.rollout)", False)]
    assert targets[0].sentence == ("step 2 (http.request) changes the service behind POST "
                                   "https://status.example.com/x, which no catalog component "
                                   "owns")
