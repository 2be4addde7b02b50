"""``opsgate demo``: the whole product in one process, with the Slack sandbox playing Slack.

On the embedded default (a SQLite file, the ledger as dedup store, the in-process bus and relay,
the offline planner model) it runs opsgate's API with the bot in HTTP mode on one port and the
sandbox on another (``http://127.0.0.1:3000``): the sandbox signs what people do on its page and
posts it to the bot's ``/slack/events``; the bot answers through the sandbox's Web API. The
agent's Kubernetes reads go to a recorded world on 127.0.0.1, the catalog is the demo's own and
the world's checkout deploy is in the change store (``bot/sandbox/demo_world.py``). With
``--postgres URL --redis URL`` the same demo runs on PostgreSQL and Redis Streams. ``--walk`` is
the core's scripted REST walk of one case instead (no browser needed).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from core.cli.command import CliError, Command

if TYPE_CHECKING:
    from bot.sandbox.demo_world import StandInWorld
    from bot.sandbox.server import Sandbox
    from bot.sandbox.serving import ThreadedServer
    from bot.settings import SlackSettings
    from core.bootstrap import App
    from core.settings import Settings

DEFAULT_PORT = 3000
STAND_INS = Path(__file__).with_name("bin")  # the demo's harmless restart-service and kubectl
HOST = "127.0.0.1"  # the demo has no authentication: never bind anything else
SHUTDOWN_GRACE_S = 10.0


def _with_stand_ins(demo: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run ``demo`` with the plans' tools pointed at the demo's stand-ins, whatever the
    environment says (a demo never touches a real service or cluster): ``restart-service`` and
    ``kubectl`` from ``bot/sandbox/bin``, first on this process's PATH."""
    os.environ.update({
        "PATH": f"{STAND_INS}{os.pathsep}{os.environ.get('PATH', '')}",
        "OPSGATE_SCRIPT_ALLOWLIST": '["checkout=restart-service"]',  # the demo's one service
        "OPSGATE_KUBECTL": str(STAND_INS / "kubectl"),
    })
    return demo(args)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port of the sandbox page on 127.0.0.1 (default: %(default)s)")
    parser.add_argument("--api-port", type=int, default=0, metavar="PORT",
                        help="port of opsgate's API and the bot's /slack/events on 127.0.0.1 "
                             "(default: any free port)")
    parser.add_argument("--postgres", metavar="URL",
                        help="run on this PostgreSQL instead of the SQLite file "
                             "(its schema is upgraded to head)")
    parser.add_argument("--redis", metavar="URL",
                        help="use this Redis for the gateway and carry the loop on Redis "
                             "Streams instead of the in-process bus")
    parser.add_argument("--chaos", action="store_true",
                        help="start with chaos on: every event retried 3 times, every click "
                             "sent twice")
    parser.add_argument("--walk", action="store_true",
                        help="walk one case through the REST API and exit (no sandbox)")
    parser.add_argument(
        "--database-url", metavar="URL",
        help="SQLAlchemy URL (default: $OPSGATE_DATABASE_URL, else sqlite:///./opsgate.db)")


def walk(args: argparse.Namespace) -> int:
    """``--walk``: the core's scripted walk of one case through the REST API (``core.demo``)."""
    from core.cli import STARTED
    from core.cli.app import opened_app, settings_of
    from core.demo import DemoFailed, demo_approvers, demo_verification, run_demo

    try:
        with opened_app(demo_approvers(demo_verification(settings_of(args)))) as app:
            run_demo(app, sys.stdout)
    except DemoFailed as failed:
        raise CliError(f"demo failed: {failed}") from failed
    print(f"demo done in {time.perf_counter() - STARTED:.2f} s (imports included)", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Start everything, print where to go, and serve until SIGINT/SIGTERM."""
    from bot.sandbox.serving import PortTaken, check_free, free_port
    from core.messaging.supervisor import stop_on_signals

    api_port = args.api_port or free_port(HOST)
    try:
        for port in (args.port, api_port):
            check_free(HOST, port)
    except PortTaken as taken:
        raise CliError(str(taken)) from taken
    demo = Demo(port=args.port, api_port=api_port, out=sys.stdout)
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        demo.start(args)
        stop.wait()
    finally:
        _exit_if_stuck(SHUTDOWN_GRACE_S)
        demo.stop()
    print("opsgate demo: stopped", flush=True)
    return 0


def _exit_if_stuck(grace_s: float) -> None:
    """A demo must stop when asked: if stopping (or a worker thread joined at exit, such as an
    agent run in progress) takes longer than ``grace_s``, leave without waiting further."""

    def leave() -> None:
        import faulthandler

        print(f"opsgate demo: still stopping after {grace_s:.0f} s; exiting now (the threads "
              "still running are on stderr)", flush=True)
        faulthandler.dump_traceback(sys.stderr, all_threads=True)
        os._exit(1)

    timer = threading.Timer(grace_s, leave)
    timer.daemon = True
    timer.start()


@dataclass
class Demo:
    """The running pieces, started in dependency order and stopped in reverse."""

    port: int
    api_port: int
    out: TextIO
    sandbox: Sandbox | None = None
    world: StandInWorld | None = None  # None when OPSGATE_KUBECONFIG names the user's own
    app: App | None = None
    servers: list[ThreadedServer] = field(default_factory=list)
    stops: list[Callable[[], None]] = field(default_factory=list)
    closing: ExitStack = field(default_factory=ExitStack)  # the app, last

    @property
    def page_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"http://{HOST}:{self.api_port}"

    def start(self, args: argparse.Namespace) -> None:
        from bot.sandbox.server import Sandbox, create_sandbox_app
        from bot.sandbox.serving import ThreadedServer
        from core.api import create_api
        from core.cli.app import opened_app

        started = time.perf_counter()
        self.sandbox = Sandbox(events_url=f"{self.api_url}/slack/events", api_url=self.api_url,
                               public_url=self.page_url, chaos=args.chaos)
        # Slack first: the bot may call auth.test while it is being built.
        self._serve(ThreadedServer(create_sandbox_app(self.sandbox), HOST, self.port,
                                   "opsgate-sandbox"))
        self._start_world()
        settings = demo_settings(args, self.sandbox, self.world)
        # A demo's database is the demo's to upgrade, PostgreSQL too.
        self.app = self.closing.enter_context(opened_app(settings, upgrade=True, notes=self.out))
        self._record_deploy(self.app)
        self._start_loop(self.app)
        self._serve(ThreadedServer(create_api(self.app), HOST, self.api_port, "opsgate-api"))
        self._welcome(settings, time.perf_counter() - started)

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        for stop in reversed(self.stops):
            stop()
        if self.sandbox is not None:
            self.sandbox.close()
        self.closing.close()

    def _serve(self, server: ThreadedServer) -> None:
        self.servers.append(server.start())

    def _start_world(self) -> None:
        """The recorded Kubernetes world, unless the user's own kubeconfig is configured;
        stopped after the loop (``stops`` run in reverse), so no agent read outlives it."""
        from bot.sandbox.demo_world import StandInWorld
        from core.settings import load_settings

        if load_settings().kubeconfig:
            return
        self.world = StandInWorld.start()
        self.stops.append(self.world.stop)

    def _record_deploy(self, app: App) -> None:
        """The world's checkout deploy, in the change store (the card's "Last change" and the
        agent's ``recent_changes`` read it)."""
        from bot.sandbox.demo_world import record_checkout_deploy

        if self.world is not None:
            record_checkout_deploy(app, self.world)

    def _start_loop(self, app: App) -> None:
        if app.settings.redis_url:
            self.stops.append(_streams_loop(app, self.out))
            return
        from core.loop import InProcessLoop

        loop = InProcessLoop(app).start()
        self.stops.append(loop.stop)

    def _welcome(self, settings: Settings, took_s: float) -> None:
        from core.cli import STARTED
        from core.evidence.configured import metrics_source_line

        engines = "PostgreSQL" if not settings.database_url.startswith("sqlite") else "SQLite"
        bus = "Redis Streams" if settings.redis_url else "in-process bus"
        print(f"opsgate demo: {engines}, {bus}, offline planner model, bot in HTTP mode at "
              f"{self.api_url}/slack/events", file=self.out, flush=True)
        print("opsgate demo: restart-service, kubectl and the traffic gateway are stand-ins "
              "(bot/sandbox/bin, the sandbox): approved plans change nothing real",
              file=self.out, flush=True)
        print(f"opsgate demo: {_world_line(settings, self.world)}", file=self.out, flush=True)
        print(f"opsgate demo: metrics: {metrics_source_line(settings)}", file=self.out,
              flush=True)
        print(f"opsgate demo: ready in {time.perf_counter() - STARTED:.2f} s "
              f"(startup {took_s:.2f} s after imports)", file=self.out, flush=True)
        print(f"\n  open {self.page_url}  — the Slack sandbox: mention @opsgate, then switch to "
              f"alice and click Approve\n  stop with Ctrl-C\n", file=self.out, flush=True)


def _world_line(settings: Settings, world: StandInWorld | None) -> str:
    """What the agent's Kubernetes reads and catalog are, in one line of the welcome."""
    from bot.sandbox.demo_world import CATALOG

    kube = (f"the Kubernetes API is a stand-in (a recorded world at {world.server.base})"
            if world is not None else f"Kubernetes is read with {settings.kubeconfig}")
    catalog = ("the catalog is a stand-in (bot/sandbox/catalog)" if settings.catalog == CATALOG
               else f"the catalog is {settings.catalog}")
    return f"{kube}; {catalog}"


def demo_settings(args: argparse.Namespace, sandbox: Sandbox,
                  world: StandInWorld | None = None) -> Settings:
    """The environment's settings with Slack pointed at the sandbox, alice the approver, the
    offline planner model and no auto-approval (a person decides at the gate). PostgreSQL and
    Redis only when asked for on the command line: a production ``OPSGATE_DATABASE_URL`` in the
    environment must not receive demo cases (nor be upgraded) by accident; the plans' tools are
    stand-ins (``_with_stand_ins``). The analyst reads the
    recorded demo series unless ``OPSGATE_SERIES_DIR`` names others, so a latency, an error or a
    memory leak case shows its finding. Verification runs on the demo's clock
    (``core.demo.demo_verification``): a plan's window after the change takes seconds. The
    catalog is the demo's and Kubernetes is ``world`` unless OPSGATE_CATALOG and
    OPSGATE_KUBECONFIG name the user's own."""
    from agent.settings import AgentSettings
    from bot.settings import SlackSettings
    from core.demo import demo_verification
    from core.settings import load_settings

    base = load_settings(SlackSettings, AgentSettings)
    database_url = _demo_database_url(args, base.database_url)
    settings = base.model_copy(update={**_sandbox_update(args, sandbox, base, database_url),
                                       **_world_update(base, world)})
    offline = base.layer(AgentSettings).model_copy(update={"model": None, "openai_api_key": None})
    return demo_verification(settings.with_layers(_sandbox_slack(sandbox, base), offline))


def _demo_database_url(args: argparse.Namespace, configured: str) -> str:
    """The command line's database, else the configured one when it is a SQLite file; a server
    database only when named on the command line."""
    database_url = args.postgres or args.database_url or configured
    if not (args.postgres or args.database_url or database_url.startswith("sqlite")):
        raise CliError("OPSGATE_DATABASE_URL is not a SQLite file; the demo writes demo cases "
                       "and upgrades its database, so name it on the command line: "
                       "`opsgate demo --postgres URL` (or unset OPSGATE_DATABASE_URL)")
    return str(database_url)


def _sandbox_update(args: argparse.Namespace, sandbox: Sandbox, base: Settings,
                    database_url: str) -> dict[str, object]:
    """The core settings the demo overrides: the traffic gateway is the sandbox, alice
    approves, the recorded series feed the analyst (the offline model plans: ``demo_settings``)."""
    from bot.sandbox.workspace import APPROVER
    from core.analysis.sources import RECORDED_DEMO

    return {
        "traffic_gateway_url": sandbox.traffic_gateway_url,  # the sandbox plays it
        "database_url": database_url,
        "redis_url": args.redis,
        "approvers": [APPROVER.id],
        "auto_approve": "off",
        "api_reads": "open",  # the sandbox's case panel reads the API without a token
        "series_dir": base.series_dir or str(RECORDED_DEMO),
    }


def _world_update(base: Settings, world: StandInWorld | None) -> dict[str, object]:
    """The demo's catalog and recorded Kubernetes world, where the user named none of theirs
    (and the stand-in traffic gateway's route owned by its checkout)."""
    from bot.sandbox.demo_world import CATALOG, CONTEXT

    update: dict[str, object] = {"catalog": base.catalog or CATALOG}
    if not base.catalog:  # the stand-in gateway's route is the stand-in checkout's traffic
        update["traffic_routes"] = base.traffic_routes or ["checkout=default"]
    if world is not None and not base.kubeconfig:
        update.update(kubeconfig=str(world.kubeconfig), kube_context=CONTEXT)
    return update


def _sandbox_slack(sandbox: Sandbox, base: Settings) -> SlackSettings:
    """The environment's Slack settings pointed at the sandbox's workspace (HTTP mode)."""
    from pydantic import SecretStr

    from bot.sandbox.workspace import CHANNEL_ID
    from bot.settings import SlackSettings

    return base.layer(SlackSettings).model_copy(update={
        "slack_bot_token": SecretStr(sandbox.bot_token),
        "slack_signing_secret": SecretStr(sandbox.signing_secret),
        "slack_app_token": None,
        "slack_api_url": sandbox.web_api_url,
        "incident_channel": CHANNEL_ID,
    })


def _streams_loop(app: App, out: TextIO) -> Callable[[], None]:
    """The production loop inside the demo: a relay onto Redis Streams and every consumer on
    its consumer group, each on a thread; returns how to stop them."""
    from core.cli.loop import connected_streams
    from core.consumers import build_consumers
    from core.loop_processes import ConsumerProcess, run_relay

    bus = connected_streams(app.settings)
    stop = threading.Event()
    process = ConsumerProcess(app, bus, build_consumers(app))
    threads = [
        threading.Thread(target=run_relay, args=(app, bus, stop, out), daemon=True,
                         name="opsgate-demo-relay"),
        threading.Thread(target=process.run, args=(stop, out), daemon=True,
                         name="opsgate-demo-consume"),
    ]
    for thread in threads:
        thread.start()

    def halt() -> None:
        stop.set()
        for thread in threads:
            thread.join(15)
        bus.client.close()

    return halt


COMMANDS = (
    Command(
        name="demo",
        summary="run the whole product locally with a Slack sandbox page",
        description="Run opsgate in one process on the embedded default (SQLite file, "
                    "in-process bus and relay, offline planner model) with the Slack bot in "
                    "HTTP mode, and a local Slack sandbox page on http://127.0.0.1:3000 to talk "
                    "to it: mention @opsgate, approve or reject plans as different people, "
                    "switch on chaos. Ctrl-C stops it. --walk instead walks one case through "
                    "the REST API and exits.",
        add_arguments=_arguments,
        run=lambda args: _with_stand_ins(walk if args.walk else run, args),
    ),
)
