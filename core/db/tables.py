"""The SQL tables of the core, declared once for SQLAlchemy and alembic, for SQLite and PostgreSQL.

JSON columns are JSONB on PostgreSQL; big integer ids fall back to INTEGER on SQLite so that
autoincrement works there.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

Json = JSON().with_variant(JSONB(), "postgresql")
OptionalJson = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""A JSON value or SQL NULL (Python's None is NULL, not JSON's null)."""
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _now() -> Column[object]:
    return Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now())


ops_case = Table(
    "ops_case",
    metadata,
    Column("id", Uuid(), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("title", String(200), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    _now(),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("components", Json, nullable=True),  # catalog component names; NULL: none named
    Index("ix_ops_case_status", "status"),
)

case_timeline = Table(
    "case_timeline",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("case_id", Uuid(), ForeignKey("ops_case.id"), nullable=False),
    Column("event", String(64), nullable=False),
    Column("actor", String(128), nullable=False),
    Column("reason", Text),
    Column("correlation_id", String(128)),
    Column("meta", Json, nullable=False),
    _now(),
    Index("ix_case_timeline_case_id", "case_id", "id"),
    Index("ix_case_timeline_correlation_id", "correlation_id"),  # migration 0005
    # migration 0018: the rows of a few events (the gate's, a card's) without the others
    Index("ix_case_timeline_case_event", "case_id", "event", "id"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("topic", String(64), nullable=False),
    Column("key", String(128), nullable=False),
    Column("payload", Json, nullable=False),
    _now(),
    Column("published_at", DateTime(timezone=True)),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("deliver_after", DateTime(timezone=True)),  # migration 0007: not published before
    # migration 0013: every consumer of the topic recorded it in its inbox (core.messaging.delivery)
    Column("delivered_at", DateTime(timezone=True)),
    Index("ix_outbox_unpublished", "id", postgresql_where=text("published_at IS NULL"),
          sqlite_where=text("published_at IS NULL")),
    Index("ix_outbox_undelivered", "id",
          postgresql_where=text("published_at IS NOT NULL AND delivered_at IS NULL"),
          sqlite_where=text("published_at IS NOT NULL AND delivered_at IS NULL")),
)

idempotency = Table(
    "idempotency",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("outcome", String(16), nullable=False),  # migration 0012: was the HTTP status
    Column("body", Text, nullable=False),
    _now(),
)

plan_proposed = Table(
    "plan_proposed",
    metadata,
    Column("id", Uuid(), primary_key=True),
    Column("case_id", Uuid(), ForeignKey("ops_case.id"), nullable=False),
    Column("case_version", Integer, nullable=False),
    Column("plan_hash", String(64), nullable=False),
    Column("plan", Json, nullable=False),
    Column("proposed_by", String(128), nullable=False),
    _now(),
    Index("ix_plan_proposed_case_id", "case_id", "case_version"),
)

plan_approved = Table(
    "plan_approved",
    metadata,
    Column("id", Uuid(), primary_key=True),
    Column("case_id", Uuid(), ForeignKey("ops_case.id"), nullable=False),
    Column("plan_id", Uuid(), ForeignKey("plan_proposed.id"), nullable=False),
    Column("plan_hash", String(64), nullable=False),
    Column("decision", Json, nullable=False),
    _now(),
    # Which approval policies admitted the decision (Cedar's permits; a refusal is a timeline
    # row) and the policy set's version (policies + catalog + approver list) then.
    Column("policies", Json, nullable=True),
    Column("policy_version", String(64), nullable=True),
    Index("ix_plan_approved_case_id", "case_id"),
)

session_fence = Table(
    "session_fence",
    metadata,
    Column("session_id", String(200), primary_key=True),
    Column("token", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

tool_call_ledger = Table(
    "tool_call_ledger",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("tool", String(128), nullable=False),
    Column("args_hash", String(64), nullable=False),
    Column("args", Json, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("session_id", String(200), nullable=False),
    Column("fence", BigInteger),
    Column("state", String(16), nullable=False),
    Column("result", Json),
    Column("error", Json),
    Column("owner", String(64)),
    Column("lease_until", DateTime(timezone=True)),
    Column("attempts", Integer, nullable=False, server_default="1"),
    _now(),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("correlation_id", String(128)),  # migration 0005: what `opsgate trace` follows
    Index("ix_tool_call_ledger_state", "state", "lease_until"),
    Index("ix_tool_call_ledger_session_id", "session_id"),
    Index("ix_tool_call_ledger_correlation_id", "correlation_id"),
)

session_lock = Table(
    "session_lock",
    metadata,
    Column("session_id", String(200), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("lease_until", DateTime(timezone=True), nullable=False),
)

inbox = Table(
    "inbox",
    metadata,
    Column("consumer", String(64), primary_key=True),
    Column("message_id", BigInteger, primary_key=True),
    Column("processed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

dead_letter = Table(
    "dead_letter",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("consumer", String(64), nullable=False),
    Column("message_id", BigInteger, nullable=False),
    Column("topic", String(64), nullable=False),
    Column("key", String(128), nullable=False),
    Column("payload", Json, nullable=False),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    _now(),
    Column("requeued_at", DateTime(timezone=True)),
    Index("ix_dead_letter_consumer", "consumer", "message_id", unique=True),
)

alert_group = Table(  # migration 0005: one row per Alertmanager group, with the case it opened
    "alert_group",
    metadata,
    Column("group_key_hash", String(64), primary_key=True),
    Column("group_key", Text, nullable=False),
    Column("receiver", String(200), nullable=False),
    Column("title", String(200), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("case_id", Uuid(), ForeignKey("ops_case.id")),
    Column("pending", Json, nullable=False),  # before 0009: resolutions seen before the case
    _now(),
    # migration 0009: the group's current case is its recurrence-th; the one before it, if any
    Column("recurrence", Integer, nullable=False, server_default="1"),
    Column("previous_case_id", Uuid(), ForeignKey("ops_case.id")),
)

api_principal = Table(  # migration 0008: one named API token, kept only as its SHA-256
    "api_principal",
    metadata,
    Column("id", Uuid(), primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("role", String(16), nullable=False),  # reader | operator | approver
    Column("slack_user", String(64)),  # the person's Slack id: one person whatever the channel
    Column("scope", Json),  # migration 0014: {"channels": [...]} it may see; NULL: every case
    Column("token_hash", String(64), nullable=False, unique=True),
    _now(),
    Column("revoked_at", DateTime(timezone=True)),
)

alert_seen = Table(  # migration 0009: each alert (fingerprint + startsAt) of a group, seen once
    "alert_seen",
    metadata,
    Column("group_key_hash", String(64), ForeignKey("alert_group.group_key_hash"),
           primary_key=True),
    Column("fingerprint", String(64), primary_key=True),
    Column("starts_at", String(64), primary_key=True),  # as Alertmanager sent it
    Column("recurrence", Integer, nullable=False),  # the group's case it belongs to
    Column("role", String(16), nullable=False),  # opened | new | resolved (seen only resolved)
    Column("case_id", Uuid()),  # once that case is known (no FK: see migration 0009)
    Column("alert", Json, nullable=False),  # labels, annotations, url (credentials stripped)
    Column("ends_at", String(64)),  # its resolution, once seen
    Column("noted_at", DateTime(timezone=True)),  # its firing note is written
    Column("resolved_noted_at", DateTime(timezone=True)),  # its resolution note is written
    _now(),  # first seen
    Index("ix_alert_seen_recurrence", "group_key_hash", "recurrence"),
)

chat_thread = Table(  # migration 0011: the chat thread of a case, bound as the case opens
    "chat_thread",
    metadata,
    Column("team", String(32), primary_key=True),
    Column("channel", String(32), primary_key=True),
    Column("thread_ts", String(32), primary_key=True),
    Column("case_id", Uuid(), ForeignKey("ops_case.id"), nullable=False, unique=True),
    _now(),
)

change_record = Table(  # migration 0016: a deploy or configuration change POSTed to /changes
    "change_record",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("change_id", String(200), nullable=False, unique=True),  # the sender's, or derived
    Column("source", String(16), nullable=False),  # generic | argocd | github
    Column("kind", String(16), nullable=False),  # deploy | config
    Column("service", String(253), nullable=False),  # as sent
    Column("component", String(253)),  # the catalog component it resolved to; NULL: none
    Column("namespace", String(63)),
    Column("version", String(200), nullable=False),  # a tag, a revision, a sha
    Column("summary", Text, nullable=False),  # cut to 500 characters (data, never instructions)
    Column("actor", String(200), nullable=False),
    Column("url", Text),
    Column("happened_at", DateTime(timezone=True), nullable=False),  # UTC
    Column("received_at", DateTime(timezone=True), nullable=False),  # UTC
    Column("fingerprint", String(64), nullable=False),  # of the content: a retry matches it
    # migration 0020: the object it changed (KIND/NAME) and its values before and after, as
    # the sender said them (JSON; NULL: not said)
    Column("target", String(300)),
    Column("before", OptionalJson),
    Column("after", OptionalJson),
    Index("ix_change_record_component_happened_at", "component", "happened_at"),
    Index("ix_change_record_service_happened_at", "service", "happened_at"),
)

approval_rights_change = Table(  # migration 0018: a change of who may approve what (issue 40)
    "approval_rights_change",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("seq", Integer, nullable=False, unique=True),  # 1, 2, …: one writer per change
    Column("recorded_at", DateTime(timezone=True), nullable=False),  # UTC
    Column("rights_version", String(64), nullable=False),  # the hash of ``after``
    Column("policy_version", String(64), nullable=False),  # the policy set's, as approvals
    Column("before", Json, nullable=False),  # {approving group: [Slack ids]} before
    Column("after", Json, nullable=False),  # … and after
    Column("names", Json, nullable=False),  # {Slack id: the person's name} as the catalog said
    Column("files", Json, nullable=False),  # the catalog and policy files changed since before
    Column("sources", Json, nullable=False),  # {file: content hash} of every file read
)
