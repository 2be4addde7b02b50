"""Who a REST caller is: named API tokens (``opsgate token``), kept only as SHA-256 hashes, each
with a role and, for a person, the Slack user id that makes them one person whatever the channel.

    reader    reads cases
    operator  reads, opens cases, moves them, proposes plans (never through the gate)
    approver  an operator who may also approve or reject plans, if a person (linked to Slack)

A person's actor (the identity the timeline and the approval policy see) is their Slack id, the
same a Slack click records; a service's is its name. ``OPSGATE_API_TOKEN`` is the service
``api-token``; with no token configured at all, writes are made by the service ``anonymous``.

A principal may be scoped to chat channels (``--channel C…``): it then reads and writes only the
cases whose thread is in one of them; every other case answers as an unknown one. Unscoped, it
sees every case its role allows.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args
from uuid import uuid4

from sqlalchemy import Engine, insert, select, update

from core.db.database import connection, transaction
from core.db.tables import api_principal
from core.domain.policy import AUTO_APPROVER
from core.errors import InvalidRequest, NotFound

Role = Literal["reader", "operator", "approver"]
ROLES: tuple[Role, ...] = get_args(Role)
Kind = Literal["person", "service"]
_ROLE_NAMED: dict[str, Role] = {role: role for role in ROLES}

TOKEN_PREFIX = "og_"  # noqa: S105 (a prefix that makes leaked tokens recognisable)
NAME_PATTERN = re.compile(r"[a-z][a-z0-9._-]{0,63}")
"""Lower case, so a principal's name can never be mistaken for a Slack id (``U012AB3CD``)."""
SLACK_USER_PATTERN = re.compile(r"[UW][A-Z0-9]{2,20}")
CHANNEL_PATTERN = re.compile(r"[CGD][A-Z0-9]{2,20}")
MAX_CHANNELS = 100
RESERVED_NAMES = frozenset({"api-token", "anonymous", "api", AUTO_APPROVER, "intake", "analyst",
                            "planner", "executor", "verifier", "notifier", "agent", "slack-bot",
                            "alertmanager", "librarian", "local-operator"})
"""Actors opsgate itself writes as: a token named like them would blur the timeline."""
_IDENTITY = (api_principal.c.name, api_principal.c.role, api_principal.c.slack_user,
             api_principal.c.scope)
"""The columns a principal is read from."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its name, role and, for a person, their Slack user id; with
    ``channels``, the only channels whose cases it sees (None: every case)."""

    name: str
    role: Role
    slack_user: str | None = None
    channels: frozenset[str] | None = None

    @property
    def kind(self) -> Kind:
        return "person" if self.slack_user else "service"

    @property
    def actor(self) -> str:
        """Who the timeline and the approval policy see: a person's Slack id, else the name."""
        return self.slack_user or self.name

    def may(self, role: Role) -> bool:
        """Whether this principal's role includes ``role``."""
        return ROLES.index(self.role) >= ROLES.index(role)

    @property
    def decides_at_the_gate(self) -> bool:
        """Only people approve or reject: an approver that is a person."""
        return self.role == "approver" and self.kind == "person"

    def attribution(self, stated_actor: str | None = None) -> dict[str, str]:
        """What the timeline keeps beside the actor: the principal's name and the actor a
        request body stated (which grants nothing)."""
        facts = {"principal": self.name}
        if stated_actor is not None and stated_actor != self.actor:
            facts["stated_actor"] = stated_actor
        return facts


API_TOKEN = Principal("api-token", "operator")
"""The holder of ``OPSGATE_API_TOKEN``: a shared service credential, never an approver."""
ANONYMOUS = Principal("anonymous", "operator")
"""The caller of a server with no token configured (a laptop): writes, never approves."""
OPEN_READER = Principal("anonymous", "reader")
"""A caller without a token while reads are open (OPSGATE_API_READS=open): reads only."""


@dataclass(frozen=True)
class PrincipalRecord:
    """One row of ``opsgate token list``: never the token, never its hash."""

    principal: Principal
    created_at: datetime
    revoked_at: datetime | None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create(engine: Engine, name: str, role: Role = "operator", slack_user: str | None = None,
           *, channels: Collection[str] | None = None,
           now: datetime | None = None) -> tuple[Principal, str]:
    """A new principal and its token, which is returned once and stored only as a hash;
    ``channels`` scopes it to those channels' cases."""
    principal = Principal(name, role, slack_user,
                          None if channels is None else frozenset(channels))
    _check(principal)
    token = _new_token()
    with transaction(engine) as conn:
        found = conn.execute(select(api_principal.c.revoked_at)
                             .where(api_principal.c.name == name)).first()
        if found is not None:
            raise InvalidRequest(_taken(name, revoked=found.revoked_at is not None), name=name)
        conn.execute(insert(api_principal).values(
            id=uuid4(), name=name, role=role, slack_user=slack_user,
            scope=_stored_scope(principal), token_hash=token_hash(token),
            created_at=now or datetime.now(UTC)))
    return principal, token


def rotate(engine: Engine, name: str, role: Role | None = None,
           slack_user: str | None = None, *,
           channels: Collection[str] | None = None) -> tuple[Principal, str]:
    """A new token for the live principal ``name``, returned once; its old token is 401 from
    now on. The principal stays as it is: a ``role``, ``slack_user`` or ``channels`` that
    differs is refused (a changed identity is another name)."""
    token = _new_token()
    with transaction(engine) as conn:
        row = conn.execute(
            select(*_IDENTITY, api_principal.c.revoked_at)
            .where(api_principal.c.name == name).with_for_update()).mappings().first()
        if row is None:
            raise NotFound(f"no principal named {name} to rotate (`opsgate token create {name}` "
                           "makes one)", name=name)
        if row["revoked_at"] is not None:
            raise InvalidRequest(_taken(name, revoked=True), name=name)
        principal = _principal(row)
        wanted = principal.channels if channels is None else frozenset(channels)
        if (role or principal.role, slack_user or principal.slack_user, wanted) != (
                principal.role, principal.slack_user, principal.channels):
            raise InvalidRequest(
                f"{name} is {_described(principal)}: rotating keeps who it is (to change that, "
                f"revoke {name} and create another name)", name=name)
        conn.execute(update(api_principal).where(api_principal.c.name == name)
                     .values(token_hash=token_hash(token)))
    return principal, token


def _new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _taken(name: str, *, revoked: bool) -> str:
    """Why ``name`` cannot be created, and what to do instead."""
    if revoked:
        return (f"a principal named {name} was revoked, and names are never reused: create "
                "another name")
    return (f"a principal named {name} exists: `opsgate token create {name} --rotate` gives it "
            "a new token and ends the old one")


def _described(principal: Principal) -> str:
    article = "a" if principal.role == "reader" else "an"
    person = f" (Slack {principal.slack_user})" if principal.slack_user else ""
    scope = "" if principal.channels is None else \
        f" of channels {', '.join(sorted(principal.channels))}"
    return f"{article} {principal.role}{person}{scope}"


def _check(principal: Principal) -> None:
    if not NAME_PATTERN.fullmatch(principal.name):
        raise InvalidRequest(f"{principal.name!r} is not a principal name: 1..64 of a-z, 0-9, "
                             "'.', '_', '-', starting with a letter", name=principal.name)
    if principal.name in RESERVED_NAMES:
        raise InvalidRequest(f"{principal.name} is an actor opsgate itself writes as",
                             name=principal.name)
    if principal.role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", role=principal.role)
    slack_user = principal.slack_user
    if slack_user is not None and not SLACK_USER_PATTERN.fullmatch(slack_user):
        raise InvalidRequest(f"{slack_user!r} is not a Slack user id (e.g. U012AB3CD)",
                             slack_user=slack_user)
    if principal.role == "approver" and slack_user is None:
        raise InvalidRequest("an approver is a person: link their Slack user id "
                             "(--slack-user U…), the identity their approvals count under")
    channels = principal.channels
    if channels is not None:
        wrong = sorted(c for c in channels if not CHANNEL_PATTERN.fullmatch(c))
        if wrong or not 1 <= len(channels) <= MAX_CHANNELS:
            raise InvalidRequest(f"{wrong[0]!r} is not a Slack channel id (e.g. C012AB3CD)"
                                 if wrong else f"a scope names 1..{MAX_CHANNELS} channels",
                                 channels=sorted(channels))


def records(engine: Engine) -> list[PrincipalRecord]:
    """Every principal, oldest first, revoked ones included."""
    columns = (*_IDENTITY, api_principal.c.created_at, api_principal.c.revoked_at)
    with connection(engine) as conn:
        rows = conn.execute(select(*columns).order_by(api_principal.c.created_at,
                                                      api_principal.c.name)).mappings().all()
    return [PrincipalRecord(_principal(row), row["created_at"], row["revoked_at"])
            for row in rows]


def revoke(engine: Engine, name: str, *, now: datetime | None = None) -> bool:
    """Revoke ``name``'s token from now on; False when it was already revoked."""
    with transaction(engine) as conn:
        found = conn.execute(select(api_principal.c.revoked_at)
                             .where(api_principal.c.name == name)).first()
        if found is None:
            raise NotFound(f"no principal named {name} (`opsgate token list` shows them)",
                           name=name)
        if found.revoked_at is not None:
            return False
        conn.execute(update(api_principal).where(api_principal.c.name == name)
                     .values(revoked_at=now or datetime.now(UTC)))
    return True


def authenticate(engine: Engine, token: str, api_token: str | None) -> Principal | None:
    """The principal ``token`` names: ``OPSGATE_API_TOKEN``'s service, or a live principal;
    None for an unknown or revoked token."""
    if api_token and hmac.compare_digest(token.encode("utf-8"), api_token.encode("utf-8")):
        return API_TOKEN
    with connection(engine) as conn:
        row = conn.execute(
            select(*_IDENTITY)
            .where(api_principal.c.token_hash == token_hash(token),
                   api_principal.c.revoked_at.is_(None))).mappings().first()
    return None if row is None else _principal(row)


def tokens_configured(engine: Engine, api_token: str | None) -> bool:
    """Whether the server has any token (then every write, and reads unless opened, need one)."""
    if api_token:
        return True
    with connection(engine) as conn:
        return conn.execute(select(api_principal.c.id)
                            .where(api_principal.c.revoked_at.is_(None)).limit(1)).first() \
            is not None


def _principal(row: Mapping[Any, Any]) -> Principal:
    # A row edited by hand to an unknown role reads as the least it could mean.
    role = _ROLE_NAMED.get(str(row["role"]), "reader")
    return Principal(str(row["name"]), role, row["slack_user"], _channels(row["scope"]))


def _stored_scope(principal: Principal) -> dict[str, list[str]] | None:
    return None if principal.channels is None else {"channels": sorted(principal.channels)}


def _channels(scope: Any) -> frozenset[str] | None:
    """A stored scope's channels; a scope edited by hand into anything else sees nothing."""
    if scope is None:
        return None
    channels = scope.get("channels") if isinstance(scope, dict) else None
    if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
        return frozenset()
    return frozenset(channels)
