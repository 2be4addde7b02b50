"""deploy/kubernetes as a platform team applies it: ``kubectl kustomize`` renders the base and the
production overlay, and every object is valid against the Kubernetes schemas of the oldest and
newest release ``kubernetes-validate`` ships (strict: an unknown field is an error). Then what the
issue asks of them: serve, relay and consume Deployments with probes (relay and consume run
``opsgate health``), resources and locked-down security contexts; a migration Job; the least RBAC
k8s.rollout needs, per listed namespace; Secret and ConfigMap placeholders that every process
refuses in one line each; the catalog and policies mounted as a kubelet mounts a ConfigMap, which
``opsgate catalog check`` and ``opsgate policy check`` read; a NetworkPolicy; and no database,
bus or cache run by these manifests (the operator's own, by URL). Beside them, the optional
three-node NATS JetStream cluster of deploy/kubernetes/nats.

Bounded: two renders by the real kubectl (/usr/bin/kubectl, ``make peers`` checks it), offline
schema checks, two short opsgate commands."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from core.cli.app import plugged_in
from core.settings import PLACEHOLDER, InvalidSettings, load_settings
from tests.support.deploy_doc import run_blocks
from tests.support.processes import clean_env, command

ROOT = Path(__file__).resolve().parents[3]
KUSTOMIZATIONS = {"base": ROOT / "deploy/kubernetes/base",
                  "production": ROOT / "deploy/kubernetes/overlays/production"}
VERSIONS = sorted({all_versions()[0], all_versions()[-1]})
PROCESSES = ("serve", "relay", "consume")
ALLOWED_KINDS = {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret",
                 "Service", "Deployment", "Job", "CronJob", "NetworkPolicy"}


def render(where: Path) -> list[dict[str, Any]]:
    result = subprocess.run(["kubectl", "kustomize", str(where)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=sorted(KUSTOMIZATIONS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(KUSTOMIZATIONS[request.param])


def the(objects: list[dict[str, Any]], kind: str, name: str,
        namespace: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)
             and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(rendered, version):
    _name, objects = rendered
    assert {o["kind"] for o in objects} <= ALLOWED_KINDS
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as invalid:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): "
                        f"{invalid.message} at {'.'.join(map(str, invalid.path))}")


def test_the_processes_have_probes_resources_and_locked_down_pods(rendered):
    _name, objects = rendered
    workloads = [o for o in objects if o["kind"] in ("Deployment", "Job", "CronJob")]
    assert {w["metadata"]["name"] for w in workloads} == {
        "opsgate-serve", "opsgate-relay", "opsgate-consume", "opsgate-migrate",
        "opsgate-reconcile"}
    for workload in workloads:
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]}}
            assert {"requests", "limits"} <= set(container["resources"])
            assert {"mountPath": "/tmp", "name": "tmp"} in container["volumeMounts"]
            assert container["image"].split("/")[-1].startswith("opsgate:")
    serve = pod_spec(the(objects, "Deployment", "opsgate-serve"))["containers"][0]
    assert serve["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert serve["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--socket-mode" in serve["args"]
    for role in ("relay", "consume"):
        container = pod_spec(the(objects, "Deployment", f"opsgate-{role}"))["containers"][0]
        assert container["args"] == [role]
        assert container["livenessProbe"]["exec"]["command"] == ["opsgate", "health", role]
        assert container["readinessProbe"]["exec"]["command"][:3] == ["opsgate", "health", role]
    assert pod_spec(the(objects, "Job", "opsgate-migrate"))["containers"][0]["args"] == [
        "migrate"]
    # A read-only root: $HOME (kubectl's cache) and the heartbeat live in the /tmp emptyDir.
    settings = the(objects, "ConfigMap", "opsgate-settings")["data"]
    assert settings["HOME"] == "/tmp" and settings["OPSGATE_HEARTBEAT_DIR"] == "/tmp"


def test_only_consume_carries_a_token_and_it_may_only_roll_deployments():
    objects = render(KUSTOMIZATIONS["production"])
    for role in ("serve", "relay"):
        assert pod_spec(the(objects, "Deployment", f"opsgate-{role}"))[
            "automountServiceAccountToken"] is False
    consume = pod_spec(the(objects, "Deployment", "opsgate-consume"))
    assert consume["serviceAccountName"] == "opsgate-rollout"
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = [o for o in objects if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["payments", "search"]
    for role in roles:
        assert role["rules"] == [
            {"apiGroups": ["apps"], "resources": ["deployments"],
             "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets"],
             "verbs": ["get", "list", "watch"]}]
        binding = the(objects, "RoleBinding", "opsgate-rollout", role["metadata"]["namespace"])
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "opsgate-rollout",
                                        "namespace": "opsgate"}]
    placed = {o["metadata"].get("namespace") for o in objects
              if o["kind"] not in ("Namespace", "Role", "RoleBinding")}
    assert placed == {"opsgate"}


def environment(objects: list[dict[str, Any]]) -> dict[str, str]:
    """What envFrom gives every process: the settings ConfigMap and the Secret."""
    import base64

    settings = the(objects, "ConfigMap", "opsgate-settings")["data"]
    secrets = {name: base64.b64decode(value).decode()
               for name, value in the(objects, "Secret", "opsgate-secrets")["data"].items()}
    return {**settings, **secrets}


def test_every_placeholder_refuses_in_one_line_until_filled(rendered, monkeypatch):
    _name, objects = rendered
    env = environment(objects)
    left = sorted(name for name, value in env.items() if PLACEHOLDER in value)
    assert {"OPSGATE_DATABASE_URL", "OPSGATE_REDIS_URL", "OPSGATE_BUS_URL", "SLACK_APP_TOKEN",
            "OPENAI_API_KEY", "OPSGATE_MODEL"} <= set(left)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InvalidSettings) as refused:
        load_settings(*plugged_in().settings)
    assert [problem.split(":")[0] for problem in refused.value.problems] == left
    for name in left:  # filled, as an operator fills them
        monkeypatch.setenv(name, env[name].replace(PLACEHOLDER, "filled").replace(
            "CHANGE-ME", "filled"))
    monkeypatch.setenv("OPSGATE_APPROVERS", "U0ALICE")  # Slack ids have their shape
    monkeypatch.setenv("OPSGATE_INCIDENT_CHANNEL", "C0INCIDENT")
    monkeypatch.setenv("OPSGATE_CATALOG", str(ROOT / "docs/examples/catalog"))
    monkeypatch.setenv("OPSGATE_POLICY", str(ROOT / "docs/examples/policies"))
    settings = load_settings(*plugged_in().settings)
    assert settings.bus_kind == "jetstream" and settings.redis_url


def mounted(config_map: dict[str, Any], at: Path) -> Path:
    """The folder a kubelet makes of a ConfigMap volume: the files in a hidden timestamped
    folder, ``..data`` linking to it, and each file's name linking through ``..data``."""
    stamped = at / "..2030_01_01_00_00_00.000000001"
    stamped.mkdir(parents=True)
    for name, text in config_map["data"].items():
        (stamped / name).write_text(text)
        (at / name).symlink_to(Path("..data") / name)
    (at / "..data").symlink_to(stamped.name)
    return at


def test_the_catalog_and_policies_read_as_a_kubelet_mounts_them(tmp_path):
    objects = render(KUSTOMIZATIONS["production"])
    catalog = mounted(the(objects, "ConfigMap", "opsgate-catalog"), tmp_path / "catalog")
    policies = mounted(the(objects, "ConfigMap", "opsgate-policies"), tmp_path / "policies")
    env = clean_env(OPSGATE_CATALOG=str(catalog), OPSGATE_POLICY=str(policies),
                    OPSGATE_APPROVERS="U0ALICE")
    for args in (("catalog", "check"), ("policy", "check")):
        checked = subprocess.run(command(*args), cwd=tmp_path, env=env, capture_output=True,
                                 text=True, timeout=60, check=False)
        assert checked.returncode == 0, f"{args}: {checked.stdout}{checked.stderr}"
    for folder, examples in ((catalog, "catalog"), (policies, "policies")):
        shipped = {p.name: p.read_text() for p in (ROOT / "docs/examples" / examples).iterdir()}
        assert {p.name: p.read_text() for p in folder.iterdir()
                if not p.name.startswith(".")} == shipped


def test_the_database_bus_and_cache_are_the_operators_never_embedded(rendered):
    _name, objects = rendered
    images = {c["image"].split("/")[-1].split(":")[0]
              for o in objects if o["kind"] in ("Deployment", "Job", "CronJob")
              for c in pod_spec(o)["containers"]}
    assert images == {"opsgate"}
    env = environment(objects)
    assert env["OPSGATE_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["OPSGATE_BUS_URL"].startswith("nats://")
    assert env["OPSGATE_REDIS_URL"].startswith(("redis://", "rediss://"))
    policy = the(objects, "NetworkPolicy", "opsgate")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "opsgate"}}
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8080}]


def test_the_first_apply_is_what_the_migrate_job_needs_and_the_job_alone():
    objects = render(KUSTOMIZATIONS["production"])
    first = sorted((o["kind"], o["metadata"]["name"].rsplit("-", 1)[0]
                    if o["kind"] in ("ConfigMap", "Secret") else o["metadata"]["name"])
                   for o in objects if o["metadata"].get("labels", {}).get(
                       "app.kubernetes.io/component") in ("config", "migrate"))
    assert first == [("ConfigMap", "opsgate-catalog"), ("ConfigMap", "opsgate-policies"),
                     ("ConfigMap", "opsgate-settings"), ("Job", "opsgate-migrate"),
                     ("Namespace", "opsgate"), ("Secret", "opsgate-secrets"),
                     ("ServiceAccount", "opsgate"), ("ServiceAccount", "opsgate-rollout")]


def test_the_documented_render(tmp_path):
    said = run_blocks("3. Kubernetes", ROOT, replaced=[
        ("> opsgate.yaml", f"> {tmp_path}/opsgate.yaml"),
        ("grep -c '^kind:' opsgate.yaml", f"grep -c '^kind:' {tmp_path}/opsgate.yaml")])
    rendered = [doc for doc in yaml.safe_load_all((tmp_path / "opsgate.yaml").read_text()) if doc]
    assert said.strip() == str(len(rendered))
    documented = next(line for line in (ROOT / "docs/deploy.md").read_text().splitlines()
                      if line.startswith("grep -c '^kind:' opsgate.yaml"))
    assert documented.endswith(f"# {len(rendered)} objects")


def test_the_nats_cluster_is_three_nodes_on_their_own_volumes_with_fsync_always(tmp_path):
    """deploy/kubernetes/nats: valid objects; a StatefulSet of three behind its headless
    Service, a volume each; the configuration fsyncs before acknowledging and routes to the
    three pods, which are the servers the production overlay's OPSGATE_BUS_URL names with three
    replicas per stream. The configuration is read by the nats-server here, which predates
    ``sync_interval`` (Debian's 2.9): without that line it is valid; with it, the option is
    the one this server does not know yet."""
    objects = render(ROOT / "deploy/kubernetes/nats")
    for version in VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    nats = the(objects, "StatefulSet", "nats")
    service = the(objects, "Service", "nats")
    assert nats["spec"]["replicas"] == 3 and nats["spec"]["serviceName"] == "nats"
    assert service["spec"]["clusterIP"] == "None"
    assert [claim["metadata"]["name"] for claim in nats["spec"]["volumeClaimTemplates"]] == [
        "data"]
    conf = the(objects, "ConfigMap", "nats-config")["data"]["nats.conf"]
    jetstream = conf[conf.index("jetstream {"):conf.index("}", conf.index("jetstream {"))]
    assert "sync_interval: always" in jetstream
    pods = [f"nats-{n}.nats.nats.svc" for n in range(3)]
    assert all(f"nats-route://{pod}:6222" in conf for pod in pods)

    production = environment(render(KUSTOMIZATIONS["production"]))
    servers = [url.removeprefix("nats://CHANGE-ME-").removesuffix(":4222")
               for url in production["OPSGATE_BUS_URL"].split(",")]
    assert servers == pods
    assert production["OPSGATE_JETSTREAM_REPLICAS"] == "3"

    (tmp_path / "without-sync.conf").write_text(
        "\n".join(line for line in conf.splitlines() if "sync_interval" not in line))
    (tmp_path / "shipped.conf").write_text(conf)
    env = {"POD_NAME": "nats-0", "PATH": "/usr/bin:/usr/sbin:/bin"}
    from tests.support.nats_server import NATS_SERVER

    valid = subprocess.run([NATS_SERVER, "-c", str(tmp_path / "without-sync.conf"), "-t"],
                           capture_output=True, text=True, timeout=30, env=env, check=False)
    assert valid.returncode == 0, valid.stderr
    shipped = subprocess.run([NATS_SERVER, "-c", str(tmp_path / "shipped.conf"), "-t"],
                             capture_output=True, text=True, timeout=30, env=env, check=False)
    assert shipped.returncode == 0 or 'unknown field "sync_interval"' in shipped.stderr, (
        shipped.stderr)
