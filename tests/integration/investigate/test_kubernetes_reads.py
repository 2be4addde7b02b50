"""The investigator's Kubernetes reads: the official client, configured from a kubeconfig as in
production, against the recorded payments world served over HTTPS on 127.0.0.1 — each read's
answer, the scope it keeps to (namespace, selector, the component's deployment), bounded logs,
only GETs ever sent, and an unreachable or refusing API told in sentences. The recorded world is
itself checked with the real ``kubectl`` where it is installed."""

from __future__ import annotations

import copy
import json
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes.client import Configuration

from agent.world.kube_objects import (
    BUSY_POD,
    INJECTED,
    INJECTED_POD,
    OOM_POD,
    demo_world,
)
from core.catalog.files import load_catalog
from core.investigate.kubernetes import KubernetesReader, KubernetesUnavailable
from core.investigate.scope import OutOfScope, Target, target_of
from core.investigate.templates import revisions_of
from core.settings_errors import InvalidSettings
from tests.support.kube_world import TOKEN, World, kube_world  # noqa: F401
from tests.support.peers import require

ROOT = Path(__file__).resolve().parents[3]
CATALOG = load_catalog(ROOT / "docs" / "examples" / "catalog")
PAYMENTS_API = target_of(CATALOG.components["payments-api"])
LEDGER_POD = "ledger-worker-5f6c8d9b7-q2w4z"
CHECKOUT_POD = "checkout-5d7c9f6b8-k7t2p"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture
def world(kube_world):  # noqa: F811
    return kube_world()


@pytest.fixture
def reader(world):
    built = KubernetesReader.from_settings(str(world.config), None)
    assert built is not None
    yield built
    built.close()


def test_the_example_catalog_gives_the_target_these_reads_use():
    expected = Target("payments-api", "payments", (("app", "payments-api"),),
                      (("service", "payments-api"),), "payments-api")
    assert expected == PAYMENTS_API


# -- objects ----------------------------------------------------------------------------------

def test_pods_of_the_component_trouble_first(reader, world):
    answer = reader.objects(PAYMENTS_API, "pods")

    pods = answer["pods"]
    assert pods[0]["name"] == OOM_POD
    assert sorted(p["name"] for p in pods) == sorted(
        f"payments-api-6d8f7c9b5-{s}" for s in ("x2kq9", "m7zp4", "r5tbn"))
    oom = pods[0]
    assert oom["ready"] == "1/2" and oom["restarts"] == 1 and oom["phase"] == "Running"
    assert oom["waiting"] == {"api": "CrashLoopBackOff"}
    assert oom["last_termination"]["api"].startswith("OOMKilled (exit 137) at ")
    assert oom["images"] == {"api": "registry.example.com/payments-api:v2.4.0",
                             "proxy": "envoyproxy/envoy:v1.29.1"}
    assert all(p["ready"] == "2/2" and "last_termination" not in p for p in pods[1:])
    assert "node" not in json.dumps(answer), "no node names in the answer"
    assert answer["left_out"] == 0 and answer["selector"] == "app=payments-api"
    [listed] = world.reads_of("/pods")
    assert listed.param("labelSelector") == "app=payments-api"


def test_deployments_in_words(reader):
    [deployment] = reader.objects(PAYMENTS_API, "deployments")["deployments"]

    assert deployment["name"] == "payments-api" and deployment["revision"] == 7
    assert deployment["replicas"] == {"desired": 3, "updated": 3, "ready": 2, "available": 2}
    assert deployment["images"]["api"] == "registry.example.com/payments-api:v2.4.0"
    assert deployment["change_cause"] == "deploy v2.4.0"
    assert deployment["conditions"][0] == ("Available is False (MinimumReplicasUnavailable): "
                                           "Deployment does not have minimum availability.")


def test_a_deployment_without_the_selector_labels_is_found_by_its_name(kube_world):  # noqa: F811
    recorded = demo_world()
    for found in recorded["objects"]:
        if found["kind"] == "Deployment" and found["metadata"]["name"] == "payments-api":
            found["metadata"]["labels"] = {"team": "payments"}
    server = kube_world(World.of(recorded))
    reader = KubernetesReader.from_settings(str(server.config), None)

    [deployment] = reader.objects(PAYMENTS_API, "deployments")["deployments"]

    assert deployment["name"] == "payments-api"
    assert [r.param("fieldSelector") for r in server.reads_of("/deployments")] == [
        None, "metadata.name=payments-api"]


def test_replicasets_newest_revision_first(reader):
    replica_sets = reader.objects(PAYMENTS_API, "replicasets")["replicasets"]

    assert [(rs["revision"], rs["images"]["api"], rs["replicas"]["desired"])
            for rs in replica_sets] == [(7, "registry.example.com/payments-api:v2.4.0", 3),
                                        (6, "registry.example.com/payments-api:v2.3.9", 0)]
    assert {rs["deployment"] for rs in replica_sets} == {"payments-api"}


def test_hpas_that_scale_the_component_with_their_metrics(reader):
    [hpa] = reader.objects(PAYMENTS_API, "hpas")["hpas"]

    assert hpa == {"name": "payments-api", "scales": "Deployment/payments-api", "min": 3,
                   "max": 10, "current": 3, "desired": 3,
                   "metrics": ["cpu 92% (target 70%)", "memory 97% (target 80%)"]}
    ledger = Target("ledger-worker", "payments", (("app", "ledger-worker"),), (),
                    "ledger-worker")
    assert reader.objects(ledger, "hpas")["hpas"] == []


def with_more_pods(count: int) -> World:
    recorded = demo_world()
    pod = next(o for o in recorded["objects"] if o["metadata"]["name"] == INJECTED_POD)
    for n in range(count):
        extra = copy.deepcopy(pod)
        extra["metadata"]["name"] = f"payments-api-6d8f7c9b5-z{n:04d}"
        recorded["objects"].append(extra)
    return World.of(recorded)


def test_at_most_fifty_objects_and_how_many_were_left_out(kube_world):  # noqa: F811
    server = kube_world(with_more_pods(60))
    reader = KubernetesReader.from_settings(str(server.config), None)

    answer = reader.objects(PAYMENTS_API, "pods")

    assert len(answer["pods"]) == 50 and answer["left_out"] == 13
    assert answer["pods"][0]["name"] == OOM_POD, "the pod in trouble is never the one left out"


def test_one_list_reads_at_most_500_and_counts_the_rest(kube_world):  # noqa: F811
    server = kube_world(with_more_pods(520))
    reader = KubernetesReader.from_settings(str(server.config), None)

    answer = reader.objects(PAYMENTS_API, "pods")

    assert len(answer["pods"]) == 50 and answer["left_out"] == 523 - 50
    [listed] = server.reads_of("/pods")
    assert listed.param("limit") == "500" and listed.param("continue") is None


def test_an_empty_selector_reads_the_whole_namespace(reader):
    default = Target("the default scope", "payments", (), ())

    names = {p["name"] for p in reader.objects(default, "pods")["pods"]}

    assert LEDGER_POD in names and OOM_POD in names
    assert reader.objects(default, "pods")["selector"] == "the whole namespace"


def test_an_unknown_kind_is_refused(reader, world):
    with pytest.raises(OutOfScope, match="ask for one of pods, deployments, replicasets"):
        reader.objects(PAYMENTS_API, "secrets")
    assert world.seen() == []


# -- events -----------------------------------------------------------------------------------

def test_events_of_the_component_newest_first(reader):
    since = datetime.now(UTC) - timedelta(hours=1)

    events = reader.events(PAYMENTS_API, since)["events"]

    assert [(e["reason"], e["object"]) for e in events][:3] == [
        ("BackOff", f"Pod/{OOM_POD}"), ("Pulled", f"Pod/{OOM_POD}"),
        ("Unhealthy", f"Pod/{OOM_POD}")]
    stamps = [e["last"] for e in events]
    assert stamps == sorted(stamps, reverse=True)
    objects = {e["object"] for e in events}
    assert "Pod/payments-api-7b9c5d4f8-h4wzt" in objects, "a deleted pod of the deployment"
    assert {"Deployment/payments-api", "ReplicaSet/payments-api-6d8f7c9b5"} <= objects
    assert f"Pod/{LEDGER_POD}" not in objects, "a neighbour's event is not the component's"
    assert all(e["last"] >= since.strftime("%Y-%m-%dT%H:%M:%S") for e in events), \
        "the five-hour-old event is before since"
    backoff = events[0]
    assert backoff["type"] == "Warning" and backoff["count"] == 2
    unhealthy = events[2]
    assert INJECTED in unhealthy["message"], "injected text arrives as the message, verbatim"


def test_events_since_a_longer_window_and_the_cap(kube_world):  # noqa: F811
    recorded = demo_world()
    event = next(o for o in recorded["objects"] if o["kind"] == "Event"
                 and o["reason"] == "BackOff" and o["involvedObject"]["name"] == OOM_POD)
    for n in range(70):
        extra = copy.deepcopy(event)
        extra["metadata"]["name"] = f"{OOM_POD}.{n:016x}"
        recorded["objects"].append(extra)
    server = kube_world(World.of(recorded))
    reader = KubernetesReader.from_settings(str(server.config), None)

    six_hours = reader.events(PAYMENTS_API, datetime.now(UTC) - timedelta(hours=6))

    assert len(six_hours["events"]) == 50
    assert six_hours["left_out"] == 70 + 9 - 50  # 79 of the component's, the oldest included


# -- logs -------------------------------------------------------------------------------------

def test_logs_of_the_default_container_as_data(reader, world):
    answer = reader.logs(PAYMENTS_API, INJECTED_POD)

    assert answer["container"] == "api", "kubectl's default-container annotation"
    log = answer["log"].splitlines()
    assert log[0] == "INFO starting payments-api v2.4.0 (git 4f2a9c1)"
    assert f'customer note "{INJECTED}"' in answer["log"]
    assert '{"level":"warn","msg":"charge latency high"' in answer["log"], \
        "a JSON log line stays text"
    [dump] = [line for line in log if line.startswith("DEBUG request dump")]
    assert len(dump) < 560 and dump.endswith("(428 more characters cut)")
    assert answer["notes"] == ["1 line(s) longer than 500 characters were cut"]
    [read] = world.reads_of("/log")
    assert (read.param("container"), read.param("tailLines"), read.param("sinceSeconds")) == (
        "api", "100", "3600")


def test_logs_are_bounded_in_lines_and_age(reader, world):
    answer = reader.logs(PAYMENTS_API, BUSY_POD, lines=5000, since_s=86_400)

    assert answer["lines"] == 500 and len(answer["log"].splitlines()) == 500
    assert answer["tail_lines"] == 500 and answer["since_s"] == 21_600
    assert answer["notes"] == ["lines 5000 was set to 500 (a read asks for 1 to 500)",
                               "since_s 86400 was set to 21600 (a read looks back at most 6 h)"]
    [read] = world.reads_of("/log")
    assert (read.param("tailLines"), read.param("sinceSeconds")) == ("500", "21600")


def test_logs_since_a_few_minutes_and_a_named_container(reader):
    recent = reader.logs(PAYMENTS_API, INJECTED_POD, since_s=600)
    proxy = reader.logs(PAYMENTS_API, OOM_POD, container="proxy")

    assert [line.split(" ")[0] for line in recent["log"].splitlines()] == ["DEBUG", "INFO"]
    assert proxy["container"] == "proxy" and "503 UF" in proxy["log"]


def test_logs_outside_the_component_are_refused_before_any_log_is_read(reader, world):
    with pytest.raises(OutOfScope, match=r"pod ledger-worker-\S+ is not payments-api's"):
        reader.logs(PAYMENTS_API, LEDGER_POD)
    with pytest.raises(OutOfScope, match=f"there is no pod {CHECKOUT_POD} in namespace "
                                              "payments"):
        reader.logs(PAYMENTS_API, CHECKOUT_POD)
    with pytest.raises(OutOfScope, match="is not a pod name"):
        reader.logs(PAYMENTS_API, "../../namespaces/shop/pods/" + CHECKOUT_POD)
    with pytest.raises(OutOfScope, match="has no container 'envoy'; it has api, proxy"):
        reader.logs(PAYMENTS_API, INJECTED_POD, container="envoy")

    assert world.reads_of("/log") == []
    assert all(r.path.startswith("/api/v1/namespaces/payments/") for r in world.seen())


# -- rollout history --------------------------------------------------------------------------

def test_rollout_history_of_the_components_deployment(reader):
    history = reader.rollout_history(PAYMENTS_API)

    assert history["deployment"] == "payments-api" and history["current_revision"] == 7
    assert [(r["revision"], r["replicaset"], r["change_cause"], r["replicas"], r["current"])
            for r in history["revisions"]] == [
        (6, "payments-api-7b9c5d4f8", "deploy v2.3.9", 0, False),
        (7, "payments-api-6d8f7c9b5", "deploy v2.4.0", 3, True)]
    previous, current = revisions_of(history)  # as the plan templates read it
    assert previous.images["api"] == "registry.example.com/payments-api:v2.3.9"
    assert current.current and current.images["api"].endswith(":v2.4.0")
    assert history["revisions"][0]["created"] < history["revisions"][1]["created"]


def test_rollout_history_keeps_to_the_replicasets_the_deployment_owns(kube_world):  # noqa: F811
    recorded = demo_world()
    canary = copy.deepcopy(next(o for o in recorded["objects"] if o["kind"] == "ReplicaSet"
                                and o["metadata"]["name"] == "payments-api-6d8f7c9b5"))
    canary["metadata"]["name"] = "payments-api-canary-5c7d9b6f4"
    canary["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    canary["metadata"]["ownerReferences"][0].update(name="payments-api-canary", uid="canary")
    recorded["objects"].append(canary)  # same app label, another deployment's
    server = kube_world(World.of(recorded))
    reader = KubernetesReader.from_settings(str(server.config), None)

    history = reader.rollout_history(PAYMENTS_API)

    assert [r["revision"] for r in history["revisions"]] == [6, 7]


def test_rollout_history_only_of_the_components_deployment(reader, world):
    with pytest.raises(OutOfScope, match="deployment ledger-worker is not payments-api's"):
        reader.rollout_history(PAYMENTS_API, "ledger-worker")
    with pytest.raises(OutOfScope, match="there is no deployment checkout in namespace "
                                              "payments"):
        reader.rollout_history(PAYMENTS_API, "checkout")
    nameless = Target("search-api", "search", (), (), None)
    with pytest.raises(OutOfScope, match="search-api names no deployment"):
        reader.rollout_history(nameless)

    assert world.reads_of("/replicasets") == [], "no history read for a refused deployment"


# -- scope, verbs and failures ----------------------------------------------------------------

def test_a_target_without_a_namespace_reads_nothing(reader, world):
    nowhere = Target("payments-api", None, (("app", "payments-api"),), (), "payments-api")

    for read in (lambda: reader.objects(nowhere, "pods"),
                 lambda: reader.events(nowhere, datetime.now(UTC)),
                 lambda: reader.logs(nowhere, INJECTED_POD),
                 lambda: reader.rollout_history(nowhere)):
        with pytest.raises(OutOfScope, match="has no Kubernetes namespace"):
            read()
    assert world.seen() == []


def test_only_reads_are_ever_sent(reader, world):
    for kind in ("pods", "deployments", "replicasets", "hpas"):
        reader.objects(PAYMENTS_API, kind)
    reader.events(PAYMENTS_API, datetime.now(UTC) - timedelta(hours=6))
    reader.logs(PAYMENTS_API, OOM_POD)
    reader.rollout_history(PAYMENTS_API)

    assert len(world.seen()) >= 12 and world.writes() == []
    # the record would show a write: the world answers one 405 and keeps it
    refused = httpx.delete(f"{world.base}/api/v1/namespaces/payments/pods/{OOM_POD}",
                           headers={"Authorization": f"Bearer {TOKEN}"}, verify=False)
    assert refused.status_code == 405 and refused.json()["reason"] == "MethodNotAllowed"
    assert [(r.method, r.path) for r in world.writes()] == [
        ("DELETE", f"/api/v1/namespaces/payments/pods/{OOM_POD}")]


def test_a_wrong_token_is_told_as_401(world):
    reader = KubernetesReader.from_settings(str(world.config), "wrong-token")

    with pytest.raises(KubernetesUnavailable) as refused:
        reader.objects(PAYMENTS_API, "pods")

    assert refused.value.message == (
        f"the Kubernetes API at {world.base} refused opsgate's credentials (401 Unauthorized) "
        "when asked to list the pods in namespace payments: the kubeconfig's token or "
        "certificate is wrong or expired")


def test_a_forbidden_namespace_is_told_as_403(kube_world):  # noqa: F811
    recorded = World.of(demo_world())
    recorded.forbidden.add("payments")
    server = kube_world(recorded)
    reader = KubernetesReader.from_settings(str(server.config), None)

    with pytest.raises(KubernetesUnavailable, match=r"does not allow opsgate to list the events "
                       r"in namespace payments \(403 Forbidden: events is forbidden: User "):
        reader.events(Target("the default scope", "payments", (), ()), datetime.now(UTC))


def test_an_unreachable_api_is_told_quickly(world, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = yaml.safe_load(world.config.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    (tmp_path / "closed").write_text(yaml.safe_dump(config))
    reader = KubernetesReader.from_settings(str(tmp_path / "closed"), None)

    started = time.monotonic()
    with pytest.raises(KubernetesUnavailable) as down:
        reader.rollout_history(PAYMENTS_API)

    assert down.value.message.startswith(f"the Kubernetes API at https://127.0.0.1:{port} "
                                         "cannot be reached to read deployment payments-api "
                                         "in namespace payments (")
    assert "refused" in down.value.message.lower()
    assert time.monotonic() - started < 5


def test_an_api_that_never_answers_times_out(world, tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts connections, never speaks
        config = yaml.safe_load(world.config.read_text())
        config["clusters"][0]["cluster"]["server"] = \
            f"https://127.0.0.1:{silent.getsockname()[1]}"
        (tmp_path / "silent").write_text(yaml.safe_dump(config))
        reader = KubernetesReader.from_settings(str(tmp_path / "silent"), None, timeout_s=0.5)

        started = time.monotonic()
        with pytest.raises(KubernetesUnavailable, match="cannot be reached to list the pods"):
            reader.objects(PAYMENTS_API, "pods")
        assert time.monotonic() - started < 5


def test_from_settings(world, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert KubernetesReader.from_settings(None, None) is None, \
        "nothing set: no source, in a cluster too"

    with pytest.raises(InvalidSettings, match=r"the kubeconfig \S+missing cannot be used"):
        KubernetesReader.from_settings(str(tmp_path / "missing"), None)
    with pytest.raises(InvalidSettings, match="cannot be used to read Kubernetes"):
        KubernetesReader.from_settings(str(world.config), "no-such-context")

    with pytest.raises(InvalidSettings, match="the in-cluster credentials cannot be used"):
        KubernetesReader.from_settings("in-cluster", None)  # no service account token here


def test_each_reader_has_its_own_configuration(world):
    before = Configuration.get_default_copy().host

    reader = KubernetesReader.from_settings(str(world.config), None)

    assert reader.host == world.base
    assert Configuration.get_default_copy().host == before != world.base


def test_importing_the_reader_leaves_the_client_unloaded():
    # the client's models take seconds to load: every opsgate process imports this module
    loaded = subprocess.run([sys.executable, "-c", "import sys, core.investigate.kubernetes; "
                             "print(sorted(m for m in sys.modules if m.startswith('kubernetes')))"],
                            capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"


def test_a_world_recorded_in_yaml_serves_the_same(kube_world, tmp_path):  # noqa: F811
    path = tmp_path / "world.yaml"
    path.write_text(yaml.safe_dump(demo_world()))
    server = kube_world(World.load(path))
    reader = KubernetesReader.from_settings(str(server.config), None)

    assert len(reader.objects(PAYMENTS_API, "pods")["pods"]) == 3
    assert INJECTED in reader.logs(PAYMENTS_API, INJECTED_POD)["log"]


# -- the recorded world, as kubectl sees it ---------------------------------------------------

def test_kubectl_reads_the_recorded_world(world, tmp_path):
    binary = require(KUBECTL)  # a kubectl the machine lacks fails the run, in one line

    def kubectl(*args: str) -> str:
        done = subprocess.run([binary, "--kubeconfig", str(world.config), "--cache-dir",
                               str(tmp_path / "cache"), *args], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    pods = json.loads(kubectl("get", "pods", "-n", "payments", "-l", "app=payments-api",
                              "-o", "json"))
    assert pods["kind"] == "List" and {p["kind"] for p in pods["items"]} == {"Pod"}
    assert sorted(p["metadata"]["name"] for p in pods["items"]) == sorted(
        [INJECTED_POD, BUSY_POD, OOM_POD])
    history = kubectl("rollout", "history", "deployment/payments-api", "-n", "payments")
    assert "6         deploy v2.3.9" in history and "7         deploy v2.4.0" in history
    assert kubectl("logs", "-n", "payments", INJECTED_POD, "--tail=1") == \
        "INFO POST /v1/charges 201 1912ms\n"
    hpas = json.loads(kubectl("get", "hpa", "-n", "payments", "-o", "json"))
    assert hpas["items"][0]["spec"]["scaleTargetRef"]["name"] == "payments-api"
    assert world.writes() == []

    denied = subprocess.run([KUBECTL, "--kubeconfig", str(world.config), "--cache-dir",
                             str(tmp_path / "cache"), "--context", "wrong-token", "get", "pods"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert denied.returncode == 1 and "Unauthorized" in denied.stderr
