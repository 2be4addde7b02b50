"""The recorded Kubernetes world in the tests: ``kube_world`` serves one (``agent.world.kube_api``,
the demo's own stand-in for a cluster's API) and writes its kubeconfig; stopped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.world.kube_api import TOKEN, KubeWorldServer, World
from agent.world.kube_objects import demo_world

__all__ = ["TOKEN", "KubeWorldServer", "World", "kube_world"]


@pytest.fixture
def kube_world(tmp_path: Path) -> Iterator[Callable[..., KubeWorldServer]]:
    """A factory: ``kube_world(world=None, token=TOKEN)`` serves ``world`` (default: the payments
    and checkout world) and writes its kubeconfig to ``server.config``; stopped at teardown."""
    started: list[KubeWorldServer] = []

    def serve(world: World | None = None, token: str = TOKEN) -> KubeWorldServer:
        server = KubeWorldServer(world or World.of(demo_world()), token).start()
        server.config = server.kubeconfig(tmp_path / f"kubeconfig-{len(started)}")
        started.append(server)
        return server

    yield serve
    for server in started:
        server.stop()
