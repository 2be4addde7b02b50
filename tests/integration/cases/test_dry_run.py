"""A dry run before anyone approves: ``plan_ready`` reads each step's target and refuses a plan
that cannot run (an unknown deployment, container or revision in the recorded Kubernetes world; a
script off the allow-list; a URL off the http allow-list) in one sentence, before the gate,
changing nothing but one refused timeline row. A plan that can run comes to the gate with its dry
run on its ``plan_ready`` row; a cluster that is not configured is "not checked", never a claim.
On SQLite and PostgreSQL; the cluster is ``agent/world/kube_api``'s, which only reads."""

from __future__ import annotations

from typing import Any

import pytest

from core.bootstrap import App
from core.domain.dry_run import DryRunReport
from core.domain.fsm import CaseEvent, CaseStatus
from core.errors import GuardFailed
from core.steps.adapters.k8s import NO_CLUSTER
from tests.support.apps import make_app
from tests.support.cases import PLAN, case_in, command, key, snapshot
from tests.support.kube_world import kube_world  # noqa: F401 (a fixture)


def rollout(**params: Any) -> dict[str, Any]:
    step = {"action": "k8s.rollout", "params": {"namespace": "payments",
                                                 "deployment": "payments-api", **params},
            "timeout_s": 120, "retry": 0}
    return {**PLAN, "title": "Roll payments-api", "steps": [step]}


def step(action: str, params: dict[str, Any]) -> dict[str, Any]:
    return {**PLAN, "steps": [{"action": action, "params": params, "timeout_s": 30,
                               "retry": 0}]}


@pytest.fixture
def clustered(engine, kube_world, tmp_path):  # noqa: F811
    """An app whose dry runs read the recorded payments world (its kubeconfig), with one
    script and one URL prefix allowed."""
    server = kube_world()
    script = tmp_path / "restart-service"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    app = make_app(engine, kubeconfig=str(server.config), script_allowlist=[str(script)],
                   http_allowlist=["https://deploys.example.com/hooks/"])
    yield app, server, script
    app.close()


def propose(app: App, plan: dict[str, Any]) -> tuple[Any, Any]:
    case_id = case_in(app.cases, CaseStatus.PLANNING)
    before = snapshot(app.engine, case_id)
    return case_id, before, app.cases.transition(command(case_id, CaseEvent.PLAN_READY,
                                                         plan=plan), key())


def refused(app: App, plan: dict[str, Any]) -> str:
    """The guard's sentence for ``plan``; the case stays in PLANNING with one refused row."""
    case_id, before, reply = propose(app, plan)
    with pytest.raises(GuardFailed) as failed:
        reply.data()
    after = snapshot(app.engine, case_id)
    assert after == {**before, "case_timeline": before["case_timeline"] + 1,
                     "idempotency": before["idempotency"] + 1}  # the refusal is the reply
    last = app.cases.timeline(case_id)[-1]
    assert (last["event"], last["meta"]["outcome"]) == ("plan_ready", "refused")
    assert "\n" not in failed.value.message
    return failed.value.message


def dry_run_of(app: App, case_id) -> DryRunReport:
    row = app.cases.timeline(case_id)[-1]
    assert (row["event"], row["meta"]["outcome"]) == ("plan_ready", "accepted")
    report = DryRunReport.of_facts(row["meta"]["plan_hash"], row["meta"].get("dry_run"))
    assert report is not None
    return report


def test_an_unknown_deployment_is_refused_before_the_gate_by_reading_the_cluster(clustered):
    app, server, _ = clustered
    said = refused(app, rollout(operation="restart", deployment="payments-apx"))
    assert said.startswith("the plan cannot run as written: step 1 (k8s.rollout): cannot run: "
                           "deployment payments/payments-apx does not exist in the cluster")
    assert server.writes() == []  # a dry run only reads


def test_an_unknown_container_or_revision_is_refused(clustered):
    app, _, _ = clustered
    said = refused(app, rollout(operation="set-image", container="worker",
                                image="registry.example.com/payments-api:v2.4.1"))
    assert "deployment payments/payments-api has no container worker (it has api, proxy)" in said
    said = refused(app, rollout(operation="undo", to_revision=3))
    assert "has no revision 3 to undo to (its revisions: 6, 7)" in said


def test_a_rollout_that_can_run_reaches_the_gate_with_what_it_would_change(clustered):
    app, server, _ = clustered
    case_id, _, reply = propose(app, rollout(operation="set-image", container="api",
                                             image="registry.example.com/payments-api:v2.4.1"))
    assert reply.data()["status"] == CaseStatus.WAIT_GATE
    lines = dry_run_of(app, case_id).lines
    assert [line.verdict for line in lines] == ["ok", "ok"]  # the step, the noop rollback
    assert lines[0].says == ("would set container api of deployment payments/payments-api: "
                             "registry.example.com/payments-api:v2.4.0 → "
                             "registry.example.com/payments-api:v2.4.1")
    case_id, _, reply = propose(app, rollout(operation="undo"))
    assert reply.data()["status"] == CaseStatus.WAIT_GATE
    assert dry_run_of(app, case_id).lines[0].says == (
        "would undo deployment payments/payments-api from revision 7 to revision 6 "
        "(api=registry.example.com/payments-api:v2.3.9, proxy=envoyproxy/envoy:v1.29.1)")
    assert server.writes() == []


def test_a_script_off_the_allow_list_is_refused_and_one_on_it_shows_its_argv(clustered):
    app, _, script = clustered
    said = refused(app, step("script.exec", {"argv": ["rm", "-rf", "/var/cache"]}))
    assert said == ("the plan cannot run as written: step 1 (script.exec): cannot run: 'rm' is "
                    "not on the script allow-list (OPSGATE_SCRIPT_ALLOWLIST)")
    case_id, _, reply = propose(app, step("script.exec", {"argv": [str(script), "--graceful"]}))
    assert reply.data()["status"] == CaseStatus.WAIT_GATE
    assert dry_run_of(app, case_id).lines[0].says == (
        f"would run {script} --graceful (allow-list entry {str(script)!r})")


def test_an_http_url_not_allowed_is_refused_and_an_allowed_one_shows_its_request(clustered):
    app, _, _ = clustered
    said = refused(app, step("http.request", {"method": "POST",
                                              "url": "https://evil.example.com/hooks/x"}))
    assert said.endswith("step 1 (http.request): cannot run: https://evil.example.com/hooks/x "
                         "is not on the http allow-list (OPSGATE_HTTP_ALLOWLIST)")
    case_id, _, reply = propose(app, step("http.request", {
        "method": "POST", "url": "https://deploys.example.com/hooks/pause",
        "json": {"service": "checkout"}}))
    assert reply.data()["status"] == CaseStatus.WAIT_GATE
    assert dry_run_of(app, case_id).lines[0].says == (
        'would send POST https://deploys.example.com/hooks/pause with body '
        '{"service": "checkout"}, expecting 2xx (the URL is on the http allow-list)')


def test_without_a_cluster_a_rollout_is_not_checked_and_still_reaches_the_gate(engine):
    app = make_app(engine)  # no OPSGATE_KUBECONFIG
    try:
        case_id, _, reply = propose(app, rollout(operation="restart"))
        assert reply.data()["status"] == CaseStatus.WAIT_GATE
        line = dry_run_of(app, case_id).lines[0]
        assert (line.verdict, line.says) == ("not_checked", NO_CLUSTER)
        assert line.text == f"step 1 (k8s.rollout): not checked: {NO_CLUSTER}"
    finally:
        app.close()
