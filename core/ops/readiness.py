"""Readiness of one opsgate process: the database answers, Redis answers when configured, the
bus is reachable, the relay keeps up (the oldest due unpublished outbox row became due less
than ``OPSGATE_READY_MAX_RELAY_LAG_S`` ago: a row scheduled for later is not late before then),
and published messages reach their consumers (none unrecorded in a consumer's inbox longer than
``OPSGATE_DELIVERY_BOUND_S`` after its publication). It also says where metric checks are read
(``metrics``), how the librarian recalls (``library``: by meaning too, or by words only and
why) and what the configuration leaves out (no metrics source, no approvers, no Slack, nothing
for the agent's looks) without withholding traffic: those checks carry a ``warning``, and the
report is ``degraded``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import redis
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from core.chat import HeldChat
from core.domain.policy import NO_APPROVERS
from core.domain.verify import NO_METRICS_SOURCE
from core.evidence.configured import has_metrics_source, metrics_source_line
from core.messaging.delivery import look, subscribers
from core.messaging.outbox import oldest_unpublished

if TYPE_CHECKING:
    from core.bootstrap import App
    from core.settings import Settings

PROBE_TIMEOUT_S = 1.0

Check = dict[str, Any]


def readiness(app: App, now: datetime | None = None) -> dict[str, Any]:
    """``{"status": "ready" | "not_ready", "degraded": bool, "checks": {name: {"ok": bool,
    …}}}``: ``degraded`` when a check carries a ``warning`` (something the process cannot do)."""
    database = check_database(app.engine)
    checks: dict[str, Check] = {"database": database}
    checks["redis"] = check_redis(app.settings.redis_url)
    if app.settings.bus_kind == "jetstream":
        checks["bus"] = check_jetstream(app.settings, now or datetime.now(UTC))
    else:
        checks["bus"] = ({"ok": checks["redis"]["ok"], "kind": "redis-streams"}
                         if app.settings.redis_url else {"ok": True, "kind": "in-process"})
    if database["ok"]:
        checks["relay_lag"] = check_relay_lag(app.engine, app.settings.ready_max_relay_lag_s,
                                              now or datetime.now(UTC))
        checks["delivery"] = check_delivery(app.engine, app.settings.delivery_bound_s,
                                            now or datetime.now(UTC))
    else:
        checks["relay_lag"] = {"ok": False, "error": "the database is unreachable"}
        checks["delivery"] = {"ok": False, "error": "the database is unreachable"}
    checks["metrics"] = check_metrics(app)
    checks["investigation"] = check_investigation(app)
    checks["library"] = check_library(app) if database["ok"] else {
        "ok": True, "warning": "the database is unreachable"}
    checks["approvers"] = check_approvers(app)
    checks["policy"] = check_policy(app)
    checks["directory"] = check_directory(app)
    checks["slack"] = check_slack(app)
    ready = all(check["ok"] for check in checks.values())
    return {"status": "ready" if ready else "not_ready",
            "degraded": any("warning" in check for check in checks.values()), "checks": checks}


def check_database(engine: Engine) -> Check:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return {"ok": False, "dialect": engine.dialect.name, "error": _first_line(exc)}
    return {"ok": True, "dialect": engine.dialect.name}


def check_redis(url: str | None) -> Check:
    if not url:
        return {"ok": True, "configured": False}
    client = redis.Redis.from_url(url, socket_timeout=PROBE_TIMEOUT_S,
                                  socket_connect_timeout=PROBE_TIMEOUT_S)
    try:
        client.ping()
    except redis.RedisError as exc:
        return {"ok": False, "configured": True, "error": _first_line(exc)}
    finally:
        client.close()
    return {"ok": True, "configured": True}


def check_jetstream(settings: Settings, now: datetime) -> Check:
    """The JetStream connection (a server answering with JetStream) and, per consumer, the
    messages not yet delivered (``pending``), delivered and not acknowledged (``unacked``),
    delivered again (``redelivered``) and the oldest unacknowledged one's age. Not ok while a
    stream or durable consumer is missing (``missing``): nothing reaches its consumer then."""
    from dataclasses import replace

    from core.consumers import subscriptions
    from core.errors import Unavailable
    from core.messaging.jetstream.bus import JetStreamBus
    from core.messaging.jetstream.config import JetStreamConfig, JetStreamSetupError

    config = replace(JetStreamConfig.of(settings), timeout_s=PROBE_TIMEOUT_S)
    check: Check = {"kind": "jetstream", "servers": config.shown}
    bus = JetStreamBus(config, name="opsgate-readyz")
    try:
        bus.connect()
        check["consumers"] = bus.consumer_states(subscriptions(), now)
    except (Unavailable, JetStreamSetupError) as exc:
        return {"ok": False, **check, "error": exc.message}
    finally:
        bus.close()
    missing = sorted({f"{stream} ({consumer})" for consumer, state in check["consumers"].items()
                      for stream in state.get("missing", ())})
    if missing:
        return {"ok": False, **check,
                "error": f"durable consumers missing on the server (it lost its store, or a "
                         f"stream was removed; the readers create them again): "
                         f"{', '.join(missing)}"}
    return {"ok": True, **check}


def check_relay_lag(engine: Engine, bound_s: float, now: datetime) -> Check:
    try:
        oldest, waiting = oldest_unpublished(engine, now)
    except SQLAlchemyError as exc:
        return {"ok": False, "error": _first_line(exc)}
    lag_s = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
    return {"ok": lag_s <= bound_s, "lag_s": round(lag_s, 3), "bound_s": bound_s,
            "unpublished": waiting}


def check_delivery(engine: Engine, bound_s: float, now: datetime) -> Check:
    """Published messages a consumer of their topic has not recorded within ``bound_s`` of
    being due (the bus lost them, or a consumer is not running): the relay sends them again
    meanwhile, and a copy sent again does not make the check ok; only the consumer's inbox
    does."""
    from core.consumers import subscriptions

    try:
        late = look(engine, subscribers(subscriptions()), now, bound_s).late
    except SQLAlchemyError as exc:
        return {"ok": False, "error": _first_line(exc)}
    check: Check = {"ok": not late, "undelivered": len(late), "bound_s": bound_s}
    if late:
        check["oldest_s"] = round(max(message.waited_s(now) for message in late), 3)
        check["waiting_for"] = sorted({name for message in late for name in message.missing})
    return check


def check_metrics(app: App) -> Check:
    """Where metric checks are read; ``configured`` False when nowhere, with a ``warning``
    (still ok: probes verify, but a plan with a metric check is refused at the guard)."""
    check: Check = {"ok": True, "configured": has_metrics_source(app.settings),
                    "source": metrics_source_line(app.settings)}
    if check["configured"]:
        return check
    return {**check, "warning": f"{NO_METRICS_SOURCE}: plans with a metric check are refused"}


def check_investigation(app: App) -> Check:
    """What the agent's looks can read (still ok when a source is missing: its looks say so);
    ``warning`` names what is missing."""
    from core.investigate.sources import missing_sources, sources_line

    line = sources_line(app.settings)
    check: Check = {"ok": True, "sources": line}
    return {**check, "warning": line} if missing_sources(app.settings) else check


def check_library(app: App) -> Check:
    """How the librarian recalls: by words and meaning (the embedding model named), or by words
    only, with why in ``warning`` (no pgvector, embeddings off, vectors of another model, the
    model's last answer failed). ``ok`` either way: full-text search still serves."""
    problem = app.library.meaning.problem() or app.library.meaning.failed
    check: Check = {"ok": True, "embeddings": app.settings.embeddings_model,
                    "recall": "words" if problem else "words and meaning"}
    return {**check, "warning": problem} if problem else check


NO_SLACK = ("Slack is not configured (SLACK_BOT_TOKEN): chat posts are held, none is recorded "
            "as sent, until it is")


def check_approvers(app: App) -> Check:
    """Whether anyone may approve: with no approvers named, plans wait at the gate. The process
    still serves (``ok``); ``warning`` says what is missing."""
    if not app.policy.nobody_named:
        return {"ok": True, "configured": True}
    return {"ok": True, "configured": False,
            "warning": f"{NO_APPROVERS}: nobody approves, plans wait at the gate until someone "
                       "is named"}


def check_policy(app: App) -> Check:
    """Which policies decide (``OPSGATE_POLICY`` or the default), the catalog they read, the
    version of the policy set with the catalog (``version``) and of the policy files in force
    (``policy_version``). ``ok`` either way; ``degraded`` names the files with a problem: a
    broken policy file (nobody approves until it is fixed) or catalog files left out (they
    grant nothing; the sound files decide); ``warning`` says it, or that no catalog names any
    component."""
    catalog = app.catalog.current()
    check: Check = {"ok": True, "policy": str(app.settings.policy or "default"),
                    "catalog": None if app.settings.catalog is None else str(app.settings.catalog),
                    "components": len(catalog.components), "version": app.policy.version}
    if app.policies is not None:
        check["policy_version"] = app.policy.cedar.version
    if app.policies is not None and app.policies.problem is not None:
        check["degraded"] = [*app.policies.broken, *app.catalog.broken]
        check["warning"] = (f"OPSGATE_POLICY: nobody approves until it is fixed: "
                            f"{app.policies.problem}")
    elif app.catalog.broken:
        check["degraded"] = list(app.catalog.broken)
        check["warning"] = (f"OPSGATE_CATALOG: left out until fixed, granting nothing: "
                            f"{', '.join(app.catalog.broken)}: {app.catalog.problem}")
    elif app.settings.policy is not None and app.settings.catalog is None:
        check["warning"] = ("OPSGATE_CATALOG is unset: no component has an owner, so policies "
                            "on owners admit nobody")
    return check


def check_directory(app: App) -> Check:
    """Where the gate reads who is in which group (``OPSGATE_DIRECTORY``). ``ok`` either way;
    ``warning`` when it is unset while a catalog or policies could name groups (then no group
    has members and only OPSGATE_APPROVERS may approve), or names a catalog path that is not
    there."""
    from core.catalog.directory import Directory

    directory = Directory.parse(app.settings.directory)
    check: Check = {"ok": True, "membership": directory.words()}
    missing = directory.missing(app.settings.catalog)
    if directory.unset and (app.settings.catalog or app.settings.policy):
        check["warning"] = f"group membership is read from {directory.words()}"
    elif missing:
        check["warning"] = (f"OPSGATE_DIRECTORY names {', '.join(missing)}, which is not in "
                            "OPSGATE_CATALOG: it makes nobody a member")
    return check


def check_slack(app: App) -> Check:
    """Whether the notifier's posts reach Slack: an outer layer plugged in its chat, and it does
    not hold them (no bot token). ``ok`` either way: the process still serves; ``warning`` says
    what is missing."""
    if app.extensions.chat is not None and not isinstance(app.chat, HeldChat):
        return {"ok": True, "configured": True}
    return {"ok": True, "configured": False, "warning": NO_SLACK}


def warnings(app: App) -> list[str]:
    """What is missing from the configuration, one line each (``serve`` prints them at start)."""
    checks = (check_approvers(app), check_policy(app), check_directory(app), check_slack(app),
              check_library(app))
    return [str(check["warning"]) for check in checks if "warning" in check]


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return lines[0][:200] if lines else type(cause).__name__
