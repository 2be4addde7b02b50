"""The evaluation's world: what the agent's looks read during a run, from real peers where they
can run here. One ``EvalWorld`` serves a whole evaluation:

- Debian's Prometheus on 127.0.0.1, every scenario's series written into it by promtool before it
  starts (each series labelled ``service=<the scenario's service>`` and ``scenario=<its name>``,
  the component's metric labels in the run's catalog);
- Debian's Alertmanager holding every scenario's alerts with the same labels;
- the recorded Kubernetes API (``agent.world.kube_api``) serving the scenario being run: its
  service's Deployment with one revision per deploy, its pods, events and logs.

Per run, ``ScenarioWorld`` writes the catalog (the scenario's component), records its changes
through the change intake as CI would post them, and points the run's settings at the three.
Times are seconds from the incident's start, ``origin``: the world starts ten minutes into the
incident, as the analyst sees it (``series.RECORDED_TO_S``). A missing binary is one line."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import yaml  # type: ignore[import-untyped]

from agent.eval.scenarios import Scenario, Service, resolve_plan, within
from agent.eval.series import RECORDED_FROM_S, RECORDED_TO_S, STEP_S, value_at
from agent.world.kube_api import KubeWorldServer, World
from agent.world.kube_objects import (
    _Recorder,
    container,
    deployment,
    event,
    log_lines,
    pod,
    pod_hash,
    replica_set,
    stamp,
)
from core.errors import OpsgateError

HISTORY_TO_S = RECORDED_TO_S + 3600  # the incident goes on (nobody fixes it) for an hour more
SCENARIO_LABEL = "scenario"
REGISTRY = "registry.example.com"
READY_TIMEOUT_S = 30.0
BINARIES = {"prometheus": ("prometheus",), "promtool": ("promtool",),
            "alertmanager": ("prometheus-alertmanager", "alertmanager")}


class WorldError(OpsgateError):
    """The evaluation's world could not be set up (a peer is missing or did not start)."""

    code = "eval_world"


def binary(name: str) -> str:
    """The path of a peer's binary on PATH (Debian's package names first); ``WorldError``."""
    for candidate in BINARIES[name]:
        found = shutil.which(candidate) or shutil.which(candidate, path="/usr/bin:/usr/sbin")
        if found:
            return found
    raise WorldError(f"opsgate eval reads metrics and alerts from a real Prometheus and "
                     f"Alertmanager: {name} is not installed (Debian: apt install prometheus "
                     "prometheus-alertmanager)")


# -- the peers ------------------------------------------------------------------------------


class _Server:
    """One peer binary on 127.0.0.1, logging into its folder; ready when ``/-/ready`` answers."""

    name = "peer"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self._log = (self.folder / f"{self.name}.log").open("ab")
        self._process = subprocess.Popen(self.command(), cwd=self.folder,  # noqa: S603 (ours)
                                         stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise WorldError(f"{self.name} exited ({self._process.returncode}) before it was "
                                 f"ready: {self._tail()}")
            with suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/-/ready", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise WorldError(f"{self.name} was not ready within {READY_TIMEOUT_S:g} s: {self._tail()}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._log is not None:
            self._log.close()

    def _tail(self) -> str:
        text = (self.folder / f"{self.name}.log").read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-3:])[-600:]


class _Prometheus(_Server):
    name = "prometheus"

    def __init__(self, folder: Path, history: str) -> None:
        super().__init__(folder)
        (folder / "prometheus.yml").write_text(json.dumps(
            {"global": {"scrape_interval": "1m", "evaluation_interval": "1m"},
             "scrape_configs": []}))
        if not history:
            return
        source = folder / "history.om"
        source.write_text(history + "# EOF\n")
        backfill = [binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source),
                    str(folder / "data")]
        done = subprocess.run(backfill, capture_output=True,  # noqa: S603 (our own command)
                              text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise WorldError(f"promtool could not write the scenarios' series: "
                             f"{done.stderr.strip()[-600:]}")

    def command(self) -> list[str]:
        return [binary("prometheus"), f"--config.file={self.folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.folder / 'data'}",
                "--storage.tsdb.retention.time=30d",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]


class _Alertmanager(_Server):
    name = "alertmanager"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        (folder / "alertmanager.yml").write_text(json.dumps(
            {"route": {"receiver": "nobody"}, "receivers": [{"name": "nobody"}]}))

    def command(self) -> list[str]:
        return [binary("alertmanager"), f"--config.file={self.folder / 'alertmanager.yml'}",
                f"--storage.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                "--log.level=warn"]

    def hold(self, alerts: list[dict[str, Any]]) -> None:
        if not alerts:
            return
        try:
            httpx.post(f"{self.base_url}/api/v2/alerts", json=alerts,
                       timeout=30.0).raise_for_status()
        except httpx.HTTPError as exc:
            raise WorldError(f"alertmanager refused the scenarios' alerts: {exc}") from exc


def _free_port() -> int:
    """A port of 127.0.0.1 free a moment ago, below Linux's ephemeral range (a client's local
    port cannot take it between this probe and the server's bind)."""
    import random

    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise WorldError("no free port on 127.0.0.1 between 20000 and 32000")


# -- what the world holds -------------------------------------------------------------------


def labels_of(scenario: Scenario, service: str) -> dict[str, str]:
    """The labels of the scenario's series and alerts (the component's metric labels)."""
    return {"service": service, SCENARIO_LABEL: scenario.name}


def history(scenarios: Iterable[Scenario], origin: datetime) -> str:
    """Every scenario's series in OpenMetrics text, one family per metric (the ``before``
    world: the incident goes on), from an hour before the incident to ``HISTORY_TO_S``."""
    families: dict[str, list[str]] = {}
    for scenario in scenarios:
        if scenario.service is None:
            continue
        labels = ",".join(f'{k}="{v}"' for k, v in labels_of(scenario,
                                                              scenario.service.name).items())
        for metric, shape in scenario.series.items():
            lines = families.setdefault(metric, [f"# TYPE {metric} gauge"])
            for t in range(RECORDED_FROM_S, HISTORY_TO_S + 1, STEP_S):
                value = value_at(scenario.name, metric, shape, t, "before")
                at = (origin + timedelta(seconds=t)).timestamp()
                lines.append(f"{metric}{{{labels}}} {value:.6g} {at:.3f}")
    return "".join(f"{line}\n" for lines in families.values() for line in lines)


def alerts_of(scenarios: Iterable[Scenario], origin: datetime) -> list[dict[str, Any]]:
    """Every scenario's alerts as Prometheus hands them to Alertmanager."""
    held = []
    for scenario in scenarios:
        if scenario.service is None:
            continue
        for alert in scenario.alerts:
            ends = origin + timedelta(seconds=alert.ends_s if alert.ends_s is not None
                                      else HISTORY_TO_S + 86400)
            held.append({
                "labels": {"alertname": alert.name, "severity": alert.severity,
                           **labels_of(scenario, scenario.service.name)},
                "annotations": {"summary": alert.summary},
                "startsAt": _iso(origin + timedelta(seconds=alert.starts_s)),
                "endsAt": _iso(ends)})
    return held


def kube_record(scenario: Scenario, origin: datetime) -> dict[str, Any]:
    """The recorded Kubernetes world of ``scenario``: its service's Deployment, one ReplicaSet
    per revision (the first at its ``version``, then each of its deploys), the current
    revision's pods, the scenario's events and the first pod's log."""
    service = scenario.service
    if service is None:
        return {"objects": [], "logs": {}}
    rec = _Recorder(origin + timedelta(seconds=RECORDED_TO_S))
    revisions = _revisions(scenario, service, origin)
    current, (deployed_at, version) = len(revisions), revisions[-1]
    app, ns = service.name, service.namespace
    containers = [container("app", f"{REGISTRY}/{app}:{version}")]
    pods_of = scenario.kubernetes.pods if scenario.kubernetes else ()
    states = [*pods_of, *([None] * (service.replicas - len(pods_of)))]
    suffixes = [pod_hash(f"{app}-pod", n)[:5] for n in range(service.replicas)]
    objects = [
        deployment(rec, ns, app, current, f"deploy {version}", containers,
                   ready=sum(state is None or not state.backing_off for state in states),
                   replicas=service.replicas),
        *(replica_set(rec, ns, app, n, f"deploy {v}", [container("app", f"{REGISTRY}/{app}:{v}")],
                      service.replicas if n == current else 0,
                      service.replicas if n == current else 0, stamp(at))
          for n, (at, v) in enumerate(revisions, start=1)),
        *(pod(rec, ns, app, current, suffixes[n], containers, rec.now - max(deployed_at, rec.now
              - timedelta(days=2)), f"node-{n % 3}", _pod_status(state, rec.now))
          for n, state in enumerate(states)),
        *_events(scenario, rec, origin, [f"{app}-{pod_hash(app, current)}-{s}" for s in suffixes]),
    ]
    logs = [(origin + timedelta(seconds=line.at_s), line.text)
            for line in (scenario.kubernetes.logs if scenario.kubernetes else ())]
    first = f"{ns}/{app}-{pod_hash(app, current)}-{suffixes[0]}"
    return {"objects": objects, "logs": {first: {"app": log_lines(logs)}}}


def _revisions(scenario: Scenario, service: Service,
               origin: datetime) -> list[tuple[datetime, str]]:
    deploys = sorted((c.at_s, c.version) for c in scenario.changes if c.kind == "deploy"
                     and (c.service or service.name) == service.name and c.version)
    first = (origin - timedelta(days=30), service.version)
    return [first, *((origin + timedelta(seconds=at), version) for at, version in deploys)]


def _pod_status(state: Any, now: datetime) -> dict[str, Any] | None:
    if state is None or (not state.restarts and state.last_ended is None):
        return None
    status: dict[str, Any] = {"restartCount": state.restarts}
    if state.last_ended is not None:
        status["lastState"] = {"terminated": {
            "exitCode": 137 if state.last_ended == "OOMKilled" else 1,
            "reason": state.last_ended, "startedAt": stamp(now - timedelta(minutes=30)),
            "finishedAt": stamp(now - timedelta(minutes=5))}}
    if state.backing_off:
        status |= {"ready": False, "started": False, "state": {"waiting": {
            "reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}}}
    return status


def _events(scenario: Scenario, rec: _Recorder, origin: datetime,
            pods: list[str]) -> list[dict[str, Any]]:
    assert scenario.service is not None
    found = []
    for seen in (scenario.kubernetes.events if scenario.kubernetes else ()):
        kind, name = (("Deployment", scenario.service.name) if seen.pod is None
                      else ("Pod", pods[min(seen.pod, len(pods) - 1)]))
        ago = rec.now - (origin + timedelta(seconds=seen.at_s))
        found.append(event(rec, scenario.service.namespace, kind, name, seen.type, seen.reason,
                           seen.message, ago, count=seen.count,
                           source="kubelet" if kind == "Pod" else "deployment-controller"))
    return found


def catalog_text(scenario: Scenario) -> str:
    """The run's catalog: the scenario's service as a Backstage component, owned by on-call."""
    assert scenario.service is not None
    service = scenario.service
    labels = ",".join(f"{k}={v}" for k, v in labels_of(scenario, service.name).items())
    owner = {"apiVersion": "backstage.io/v1alpha1", "kind": "Group",
             "metadata": {"name": "oncall"}, "spec": {"type": "team", "children": []}}
    text: str = yaml.safe_dump_all([owner, {
        "apiVersion": "backstage.io/v1alpha1", "kind": "Component",
        "metadata": {"name": service.name, "title": service.name,
                     "description": service.description or f"The {service.name} service.",
                     "annotations": {"backstage.io/kubernetes-id": service.name,
                                     "backstage.io/kubernetes-namespace": service.namespace,
                                     "backstage.io/kubernetes-label-selector":
                                         f"app={service.name}",
                                     "opsgate.dev/metric-labels": labels,
                                     **remedy_annotations(service)}},
        "spec": {"type": "service", "lifecycle": "production", "owner": "group:default/oncall"},
    }], sort_keys=False)
    return text


def remedy_annotations(service: Service) -> dict[str, str]:
    """The catalog annotations the remedies read (``core.domain.remedy``) that the scenario
    gives: its regions (its route is its name), its most replicas, its FeatureFlag resource."""
    found = {"opsgate.dev/regions": ",".join(service.regions)} if service.regions else {}
    if service.flags is not None:
        found["opsgate.dev/flags"] = service.flags
    if service.max_replicas is not None:
        found["opsgate.dev/max-replicas"] = str(service.max_replicas)
    return found


def change_bodies(scenario: Scenario, origin: datetime) -> list[bytes]:
    """The scenario's changes as generic ``/changes`` bodies, as CI would post them."""
    bodies = []
    for n, change in enumerate(scenario.changes):
        service = change.service or (scenario.service.name if scenario.service else "")
        namespace = scenario.service.namespace if scenario.service else None
        body = {"id": f"eval:{scenario.name}:{n}", "service": service, "kind": change.kind,
                "version": change.version or f"{change.kind}-{n}", "summary": change.summary,
                "actor": change.by, "at": _iso(origin + timedelta(seconds=change.at_s)),
                **({"namespace": namespace} if namespace else {}),
                **{k: v for k, v in (("target", change.target), ("before", change.before),
                                     ("after", change.after)) if v is not None}}
        bodies.append(json.dumps(body).encode())
    return bodies


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- one evaluation's world -----------------------------------------------------------------


@dataclass
class EvalWorld:
    """The peers of one evaluation, and where the runs find them."""

    origin: datetime
    prometheus_url: str
    alertmanager_url: str
    kube: KubeWorldServer
    kubeconfig: Path

    def serve(self, scenario: Scenario) -> None:
        """Let the Kubernetes API answer as ``scenario``'s world."""
        self.kube.world = World.of(kube_record(scenario, self.origin))


@contextmanager
def eval_world(scenarios: list[Scenario]) -> Iterator[EvalWorld]:
    """Start the peers holding ``scenarios``' world; stopped when the block ends."""
    origin = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=RECORDED_TO_S)
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="opsgate-world-")))
        prometheus = _Prometheus(within(folder, folder / "prometheus"),
                                 history(scenarios, origin))
        stack.callback(prometheus.stop)
        prometheus.start()
        alertmanager = _Alertmanager(within(folder, folder / "alertmanager"))
        stack.callback(alertmanager.stop)
        alertmanager.start()
        alertmanager.hold(alerts_of(scenarios, origin))
        kube = KubeWorldServer(World([])).start()
        stack.callback(kube.stop)
        config = kube.kubeconfig(within(folder, folder / "kubeconfig"), namespace="default")
        yield EvalWorld(origin, prometheus.base_url, alertmanager.base_url, kube, config)


def world_settings(world: EvalWorld, scenario: Scenario, work: Path) -> dict[str, Any]:
    """The run's settings pointing at the world (and its catalog, written into ``work``)."""
    if scenario.service is None:
        return {}
    catalog = within(work, work / "catalog-info.yaml")
    catalog.write_text(catalog_text(scenario))
    world.serve(scenario)
    return {"prometheus_url": world.prometheus_url, "alertmanager_url": world.alertmanager_url,
            "kubeconfig": str(world.kubeconfig), "catalog": catalog,
            **past_entries(scenario)}


def past_entries(scenario: Scenario) -> dict[str, list[str]]:
    """The traffic-gateway routes and scripts the scenario's past plans used, as the scenario's
    service's (``OPSGATE_TRAFFIC_ROUTES``, ``OPSGATE_SCRIPT_ALLOWLIST``): its owners approved
    them, and the targets rule judges them as theirs."""
    assert scenario.service is not None
    routes: set[str] = set()
    scripts: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            given = node.get("params")
            params: dict[str, Any] = given if isinstance(given, dict) else {}
            if node.get("action") == "gateway.flip" and isinstance(params.get("route"), str):
                routes.add(params["route"])
            argv = params.get("argv")
            if node.get("action") == "script.exec" and isinstance(argv, list) and argv:
                scripts.add(str(argv[0]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for past in scenario.past_cases:
        walk(resolve_plan(past.plan))
    name = scenario.service.name
    if scenario.service.regions:  # the remedy flips the route named after the service
        routes.add(name)
    found = {"traffic_routes": [f"{name}={route}" for route in sorted(routes)]}
    if scripts:
        found["script_allowlist"] = [f"{name}={script}" for script in sorted(scripts)]
    return found


def record_changes(intake: Any, scenario: Scenario, origin: datetime) -> None:
    """The scenario's changes through the change intake (``ChangeIntake.receive``)."""
    for body in change_bodies(scenario, origin):
        intake.receive(body, declared="generic")
