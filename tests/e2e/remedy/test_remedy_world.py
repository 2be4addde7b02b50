"""The remedy on the recorded Kubernetes world through the official client, SQLite and
PostgreSQL: a ConfigMap incident's plan sets the ConfigMap back to its recorded ``before`` data
and restarts what mounts it; its dry run (``dryRun=All``) says the difference in words and
changes nothing; after the gate the world's ConfigMap holds the old data and no Deployment's
image or revision changed. A flag incident's plan sets the flag back and writes nothing else."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent.world.kube_api import KubeWorldServer, World
from agent.world.kube_objects import demo_world
from core.consumers.executor import Executor
from core.domain.dry_run import DryRunReport
from core.domain.messages import Topic
from core.domain.remedy import Workload, remedy
from core.messaging.consumer import ConsumerRunner
from tests.support.plan_runs import S, envelope_of, executing_case, make_app, status

CHECKS = ({"metric": "http_5xx_ratio", "below": 0.003, "for_s": 300},)
LEDGER = Workload("payments", "ledger-worker", 1, ("ledger-config",))


def recorded_world() -> World:
    recorded = demo_world()
    recorded["objects"] += [
        {"kind": "ConfigMap", "apiVersion": "v1", "data": {"payout.timeout": "3s",
                                                           "payout.retries": "2"},
         "metadata": {"name": "ledger-config", "namespace": "payments",
                      "resourceVersion": "1"}},
        {"kind": "FeatureFlag", "apiVersion": "core.openfeature.dev/v1beta1",
         "metadata": {"name": "payments-flags", "namespace": "payments", "resourceVersion": "1"},
         "spec": {"flagSpec": {"flags": {"new-payout": {
             "state": "ENABLED", "defaultVariant": "on",
             "variants": {"on": True, "off": False}}}}}},
    ]
    return World.of(recorded)


@pytest.fixture
def cluster(tmp_path: Path):
    server = KubeWorldServer(recorded_world(), writable=True).start()
    server.config = server.kubeconfig(tmp_path / "kubeconfig")
    kubectl = tmp_path / "kubectl"  # the restart's kubectl: records its argv, as a cluster's would
    calls = tmp_path / "kubectl-calls"
    kubectl.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> '{calls}'
        """))
    kubectl.chmod(0o755)
    yield server, kubectl, calls
    server.stop()


def held(server: KubeWorldServer, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in server.world.objects
                if o["kind"] == kind and o["metadata"]["name"] == name)


def dry_run_of(app, case_id) -> DryRunReport:
    row = next(r for r in app.cases.timeline(case_id) if r["event"] == "plan_ready")
    report = DryRunReport.of_facts(row["meta"]["plan_hash"], row["meta"].get("dry_run"))
    assert report is not None
    return report


def run(app, case_id) -> None:
    runner = ConsumerRunner(app.engine, Executor(app), sleep=lambda _s: None)
    assert runner.deliver(envelope_of(app.engine, case_id, Topic.EXEC_RUN)) == "done"


def test_a_configmap_incident_sets_the_configmap_back_and_restarts(engine, cluster):
    server, kubectl, calls = cluster
    deployments = {d["metadata"]["name"]: d for d in server.world.objects
                   if d["kind"] == "Deployment"}
    before = {name: (d["metadata"]["annotations"], d["spec"]["template"]["spec"])
              for name, d in deployments.items()}
    change = {"kind": "config", "service": "ledger-worker", "target": "configmap/ledger-config",
              "before": {"payout.timeout": "3000ms", "payout.retries": "2"},
              "after": {"payout.timeout": "3s", "payout.retries": "2"}}
    plan = remedy("config", change, LEDGER, {}, CHECKS).plan
    assert plan is not None
    app = make_app(engine, kubeconfig=str(server.config), kubectl=str(kubectl))
    try:
        case_id = executing_case(app, plan)
        said = [line.says for line in dry_run_of(app, case_id).lines]
        assert said[0] == ("would change ConfigMap payments/ledger-config: payout.timeout "
                           "3s → 3000ms")
        assert held(server, "ConfigMap", "ledger-config")["data"]["payout.timeout"] == "3s"
        assert all(w.param("dryRun") == "All" for w in server.writes())

        run(app, case_id)
        assert status(app, case_id) == S.VERIFYING
    finally:
        app.close()
    assert held(server, "ConfigMap", "ledger-config")["data"] == change["before"]
    assert [line.split()[2:5] for line in calls.read_text().splitlines()] == [
        ["rollout", "restart", "deployment/ledger-worker"],
        ["rollout", "status", "deployment/ledger-worker"]]
    after = {name: (d["metadata"]["annotations"], d["spec"]["template"]["spec"])
             for name, d in ((n, held(server, "Deployment", n)) for n in deployments)}
    assert after == before  # no Deployment's revision or image changed in the API
    kept = [w for w in server.writes() if w.param("dryRun") != "All"]
    assert [w.path for w in kept] == ["/api/v1/namespaces/payments/configmaps/ledger-config"]


def test_a_flag_incident_sets_the_flag_back_and_nothing_else(engine, cluster):
    server, kubectl, calls = cluster
    change = {"kind": "config", "service": "ledger-worker", "target": "flag/new-payout",
              "before": {"defaultVariant": "off"}, "after": {"defaultVariant": "on"}}
    plan = remedy("flag", change, LEDGER, {"flags": "payments-flags"}, CHECKS).plan
    assert plan is not None
    app = make_app(engine, kubeconfig=str(server.config), kubectl=str(kubectl))
    try:
        case_id = executing_case(app, plan)
        assert dry_run_of(app, case_id).lines[0].says == (
            "would change flag new-payout of FeatureFlag payments/payments-flags: "
            "defaultVariant on → off")
        run(app, case_id)
        assert status(app, case_id) == S.VERIFYING
    finally:
        app.close()
    flag = held(server, "FeatureFlag", "payments-flags")["spec"]["flagSpec"]["flags"]
    assert flag["new-payout"]["defaultVariant"] == "off"
    assert flag["new-payout"]["variants"] == {"on": True, "off": False}
    kept = [w for w in server.writes() if w.param("dryRun") != "All"]
    assert [w.path for w in kept] == [
        "/apis/core.openfeature.dev/v1beta1/namespaces/payments/featureflags/payments-flags"]
    assert not calls.exists()  # no rollout of anything
