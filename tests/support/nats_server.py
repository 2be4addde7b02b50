"""A ``nats-server -js`` of the test's own on a free port of 127.0.0.1 with its own store
directory: ``kill9()`` and ``start()`` again come back on the same store (streams, consumers and
their acknowledgments kept), as a JetStream server does after a crash; ``restart_empty()`` comes
back on the same port with its store gone, as a pod started without its volume does."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from tests.support.own_server import OwnServer
from tests.support.peers import free_port, poll
from tests.support.servers import missing

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


class NatsServer(OwnServer):
    """``with NatsServer(tmp_path) as server:`` then ``server.url``."""

    log_name = "nats-server.log"

    def __init__(self, workdir: Path, *, jetstream: bool = True) -> None:
        super().__init__(workdir)
        self.store = workdir / "jetstream"
        self.jetstream = jetstream
        self.cluster_args: list[str] = []  # set by NatsCluster: name, route port, routes

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        if not os.access(NATS_SERVER, os.X_OK):
            missing(f"nats-server is not installed ({NATS_SERVER}; Debian's nats-server)")
        args = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.store)]
        self._launch(args + self.cluster_args)
        poll(self._answers, 15, f"nats-server on port {self.port}", 0.05)
        return self

    def restart(self) -> None:
        """kill -9, then start again on the same port and store."""
        self.kill9()
        self.start()
        self.restarts += 1

    def restart_empty(self) -> None:
        """kill -9, remove the store, then start again on the same port: every stream, consumer
        and message gone."""
        self.kill9()
        shutil.rmtree(self.store, ignore_errors=True)
        self.start()
        self.restarts += 1

    def _answers(self) -> bool:
        assert self._running(), f"nats-server exited: {self.log_tail()}"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                return conn.recv(4).startswith(b"INFO")
        except OSError:
            return False


class NatsCluster:
    """Three ``NatsServer``s of the test's own, routed to each other on free ports of
    127.0.0.1 (a JetStream cluster: R3 streams, a meta leader, quorum two of three)."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.nodes: list[NatsServer] = []
        route_ports = [free_port() for _ in range(size)]
        routes = ",".join(f"nats://127.0.0.1:{port}" for port in route_ports)
        for n, route_port in enumerate(route_ports, 1):
            (workdir / f"n{n}").mkdir()
            node = NatsServer(workdir / f"n{n}")
            node.cluster_args = ["-n", f"n{n}", "--cluster_name", "opsgate",
                                 "--cluster", f"nats://127.0.0.1:{route_port}",
                                 "--routes", routes]
            self.nodes.append(node)

    @property
    def url(self) -> str:
        """Every node, as OPSGATE_BUS_URL takes them."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> NatsServer:
        return self.nodes[int(name.removeprefix("n")) - 1]

    def __enter__(self) -> NatsCluster:
        for node in self.nodes:
            node.start()
        poll(self.has_jetstream, 30, "the cluster to elect its JetStream leader", 0.5)
        return self

    def has_jetstream(self) -> bool:
        """Whether the cluster answers JetStream requests (a meta leader is elected)."""
        from core.errors import OpsgateError
        from core.messaging.jetstream.bus import JetStreamBus
        from core.messaging.jetstream.config import JetStreamConfig

        bus = JetStreamBus(JetStreamConfig(tuple(self.url.split(",")), timeout_s=2.0))
        try:
            bus.connect()
            return True
        except OpsgateError:
            return False
        finally:
            bus.close()

    def __exit__(self, *_exc: object) -> None:
        for node in self.nodes:
            node.stop()
