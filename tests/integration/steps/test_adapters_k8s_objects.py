"""k8s.scale, k8s.configmap and flag.set through the official Kubernetes client against the
recorded world served writable: the dry run sends ``dryRun=All`` and leaves the object as it
was, says the difference in words and refuses an empty one; the run patches the object."""

from __future__ import annotations

from typing import Any

import pytest

from agent.world.kube_api import KubeWorldServer, World
from agent.world.kube_objects import demo_world
from core.investigate.kubernetes import KubernetesReader
from core.steps.adapters import StepContext, StepRefused
from core.steps.adapters.k8s_objects import (
    ApiObjects,
    FlagSetAdapter,
    K8sConfigMapAdapter,
    K8sScaleAdapter,
    KubeObjects,
)

CTX = StepContext.for_step("case", "hash", 0, 1, 10.0)


def configmap(data: dict[str, str]) -> dict[str, Any]:
    return {"kind": "ConfigMap", "apiVersion": "v1", "data": data,
            "metadata": {"name": "ledger-config", "namespace": "payments",
                         "resourceVersion": "1"}}


def flags(rollout: int) -> dict[str, Any]:
    return {"kind": "FeatureFlag", "apiVersion": "core.openfeature.dev/v1beta1",
            "metadata": {"name": "payments-flags", "namespace": "payments",
                         "resourceVersion": "1"},
            "spec": {"flagSpec": {"flags": {"new-payout": {
                "state": "ENABLED", "defaultVariant": "off", "variants": {"on": True, "off": False},
                "rollout": rollout}}}}}


@pytest.fixture
def served(tmp_path):
    recorded = demo_world()
    recorded["objects"] += [configmap({"payout.timeout": "3s", "payout.retries": "2"}),
                            flags(50)]
    server = KubeWorldServer(World.of(recorded), writable=True).start()
    server.config = server.kubeconfig(tmp_path / "kubeconfig")
    reader = KubernetesReader.from_settings(str(server.config), None)
    assert reader is not None
    yield server, ApiObjects(reader.api)
    reader.close()
    server.stop()


def held(server: KubeWorldServer, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in server.world.objects
                if o["kind"] == kind and o["metadata"]["name"] == name)


def test_a_configmap_is_set_back_to_its_recorded_data(served):
    server, objects = served
    adapter = K8sConfigMapAdapter(lambda: objects)
    params = {"namespace": "payments", "name": "ledger-config",
              "data": {"payout.timeout": "3000ms", "payout.retries": "2"}}

    verdict, says = adapter.dry_run(params)
    assert verdict == "ok"
    assert says == "would change ConfigMap payments/ledger-config: payout.timeout 3s → 3000ms"
    assert held(server, "ConfigMap", "ledger-config")["data"]["payout.timeout"] == "3s"
    assert [w.param("dryRun") for w in server.writes()] == ["All"]

    outcome = adapter.run(params, CTX)
    assert outcome.ok, outcome.summary
    assert held(server, "ConfigMap", "ledger-config")["data"] == params["data"]
    with pytest.raises(StepRefused, match="would change nothing"):
        adapter.dry_run(params)


def test_a_key_the_recorded_data_lacks_is_removed(served):
    server, objects = served
    outcome = K8sConfigMapAdapter(lambda: objects).run(
        {"namespace": "payments", "name": "ledger-config", "data": {"payout.timeout": "3000ms"}},
        CTX)
    assert outcome.ok
    assert "payout.retries" in outcome.summary and "removed" in outcome.summary
    assert held(server, "ConfigMap", "ledger-config")["data"] == {"payout.timeout": "3000ms"}


def test_a_flag_is_set_back_and_nothing_else_is_written(served):
    server, objects = served
    adapter = FlagSetAdapter(lambda: objects)
    params = {"namespace": "payments", "name": "payments-flags", "flag": "new-payout",
              "value": {"rollout": 0}}
    assert adapter.dry_run(params) == (
        "ok", "would change flag new-payout of FeatureFlag payments/payments-flags: "
              "rollout 50 → 0")
    assert adapter.run(params, CTX).ok
    flag = held(server, "FeatureFlag", "payments-flags")["spec"]["flagSpec"]["flags"]
    assert flag["new-payout"]["rollout"] == 0 and flag["new-payout"]["defaultVariant"] == "off"
    assert {w.path.split("/")[-2] for w in server.writes()} == {"featureflags"}


def test_a_flag_the_resource_lacks_is_refused(served):
    _, objects = served
    with pytest.raises(StepRefused, match="has no flag dark-mode"):
        FlagSetAdapter(lambda: objects).dry_run(
            {"namespace": "payments", "name": "payments-flags", "flag": "dark-mode",
             "value": {"rollout": 0}})


def test_scale_patches_the_scale_subresource(served):
    server, objects = served
    adapter = K8sScaleAdapter(lambda: objects)
    params = {"namespace": "payments", "deployment": "payments-api", "replicas": 6}
    assert adapter.dry_run(params) == (
        "ok", "would change Deployment payments/payments-api: replicas 3 → 6")
    assert held(server, "Deployment", "payments-api")["spec"]["replicas"] == 3
    assert adapter.run(params, CTX).ok
    assert held(server, "Deployment", "payments-api")["spec"]["replicas"] == 6
    assert all(w.path.endswith("/scale") for w in server.writes())


def test_a_missing_object_fails_the_step_and_no_cluster_is_not_checked(served):
    _, objects = served
    adapter = K8sConfigMapAdapter(lambda: objects)
    missing = {"namespace": "payments", "name": "nope", "data": {"a": "b"}}
    outcome = adapter.run(missing, CTX)
    assert not outcome.ok and "404" in outcome.summary
    unconfigured = K8sConfigMapAdapter(lambda: None)
    assert unconfigured.dry_run(missing)[0] == "not_checked"
    with pytest.raises(StepRefused, match="invalid params"):
        K8sScaleAdapter(lambda: objects).dry_run({"namespace": "payments"})


def _typed(objects: ApiObjects) -> KubeObjects:
    return objects  # ApiObjects is the protocol's implementation (checked by mypy)
