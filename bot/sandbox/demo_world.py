"""The demo's stand-in service: the recorded Kubernetes world (``agent.world.kube_objects``),
served on 127.0.0.1 with a kubeconfig of the demo's own, the demo's catalog
(``bot/sandbox/catalog``), and the checkout deploy that world remembers, recorded as CI would
post it to ``/changes``."""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.world.kube_api import KubeWorldServer, World
from agent.world.kube_objects import REVISION, SHOP, demo_world

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.changes import Recorded

CATALOG = Path(__file__).with_name("catalog")
CONTEXT = "recorded-world"  # the kubeconfig's context that reads the world (KubeWorldServer)
CHECKOUT = "checkout"
DEPLOY_SUMMARY = "new cart pricing"


@dataclass
class StandInWorld:
    """The recorded world served over HTTPS, and the folder its kubeconfig lives in."""

    server: KubeWorldServer
    record: Mapping[str, Any]
    folder: tempfile.TemporaryDirectory[str]

    @classmethod
    def start(cls) -> StandInWorld:
        """The demo world as it stands now, served with a fresh token."""
        record = demo_world()
        server = KubeWorldServer(World.of(record), token=secrets.token_urlsafe(16)).start()
        folder = tempfile.TemporaryDirectory(prefix="opsgate-demo-kube-")
        server.kubeconfig(Path(folder.name) / "kubeconfig", namespace=SHOP)
        return cls(server, record, folder)

    @property
    def kubeconfig(self) -> Path:
        return Path(self.folder.name) / "kubeconfig"

    def stop(self) -> None:
        self.server.stop()
        self.folder.cleanup()

    def checkout_deploy(self) -> dict[str, str]:
        """The deploy of checkout's current revision, as a generic ``/changes`` body: when its
        ReplicaSet was made, the image tag it runs, by ``ci``. The id names the revision and
        its time: a restarted demo remembers the deploy at a new time, so it is a new change
        (the same id with another time would be refused as a reused id)."""
        revision, created, image = _current_revision(self.record, SHOP, CHECKOUT)
        version = image.rsplit(":", 1)[-1]
        return {"id": f"demo:{SHOP}/{CHECKOUT}:{revision}@{created}", "service": CHECKOUT,
                "namespace": SHOP, "kind": "deploy", "version": version,
                "summary": f"{CHECKOUT} {version}: {DEPLOY_SUMMARY}", "actor": "ci",
                "at": created}


def record_checkout_deploy(app: App, world: StandInWorld) -> Recorded:
    """Record the world's checkout deploy through the change intake (as ``POST /changes``
    would), resolved in the app's catalog."""
    from core.changes import ChangeIntake, ChangeStore, Recorded
    from core.cli.command import CliError

    body = json.dumps(world.checkout_deploy()).encode()
    recorded = ChangeIntake(ChangeStore(app.engine), app.catalog.current).receive(
        body, declared="generic")
    if not isinstance(recorded, Recorded):  # a generic body is always a change to record
        raise CliError(f"the demo's checkout deploy was not recorded: {recorded.reason}")
    return recorded


def _current_revision(record: Mapping[str, Any], namespace: str,
                      deployment: str) -> tuple[int, str, str]:
    """(revision, creation time, first image) of ``deployment``'s current ReplicaSet."""
    objects = [o for o in record["objects"] if o["metadata"].get("namespace") == namespace]
    found = next(o for o in objects if o["kind"] == "Deployment"
                 and o["metadata"]["name"] == deployment)
    current = found["metadata"]["annotations"][REVISION]
    replica_set = next(o for o in objects if o["kind"] == "ReplicaSet"
                       and _owner(o) == deployment
                       and o["metadata"]["annotations"].get(REVISION) == current)
    image = replica_set["spec"]["template"]["spec"]["containers"][0]["image"]
    return int(current), str(replica_set["metadata"]["creationTimestamp"]), str(image)


def _owner(found: Mapping[str, Any]) -> str | None:
    owners = found["metadata"].get("ownerReferences") or [{}]
    name = owners[0].get("name")
    return None if name is None else str(name)
