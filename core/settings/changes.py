"""The settings of a change: the approval gate it waits at, the gateway its calls go through and
the executor adapters that make them (docs/approvals.md, docs/executor.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from core.settings.forms import DirectoryEntries, EnvNames, HttpUrl, Names

SLACK_ID = re.compile(r"[UWS][A-Z0-9]{2,}")
"""A Slack user id (``U…``, ``W…`` on Enterprise Grid) or user group id (``S…``)."""


def approver_problems(approvers: list[str]) -> list[str]:
    """The line saying which of ``approvers`` (OPSGATE_APPROVERS as the environment gives it)
    are no Slack ids: a name such as ``alice`` would never match a click. Tests name their
    approvers freely in process; a process started from the environment is held to this."""
    bad = [name for name in approvers if not SLACK_ID.fullmatch(name)]
    if not bad:
        return []
    shown = ",".join(approvers)
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    return [f"OPSGATE_APPROVERS={shown}: {', '.join(repr(name) for name in bad)} "
            f"{'is no Slack id' if len(bad) == 1 else 'are no Slack ids'}; expected Slack user "
            "ids (U…, W…) or user group ids (S…), separated by commas (U012AB3CD,S0614TZR7)"]


class GateSettings(BaseModel):
    """The approval gate (docs/approvals.md): who approves, and what passes without a person."""

    approvers: Names = Field(
        default_factory=list,
        description="Who may approve plans: Slack user ids and/or user group ids, e.g. "
        "'U012AB3CD,S0614TZR7' (or a JSON list). Empty: nobody approves; plans wait at the "
        "gate until someone is named (OPSGATE_AUTO_APPROVE still covers what it names).",
    )
    auto_approve: Literal["off", "noop_only", "low_risk"] = Field(
        default="off",
        description="Plans the gatekeeper approves without a human: none, noop-only plans, or "
        "noop-only plans and those with risk below OPSGATE_AUTO_APPROVE_MAX_RISK.",
    )
    auto_approve_max_risk: float = Field(
        default=0.3, ge=0, le=1, multiple_of=0.0001,
        description="low_risk auto-approval: risk strictly below this (four decimal places "
        "at most, as Cedar's decimals).",
    )
    two_person_risk: float = Field(
        default=0.7, ge=0, le=1, multiple_of=0.0001,
        description="Plans with at least this risk need two distinct approvers (four decimal "
        "places at most, as Cedar's decimals).",
    )
    approval_ttl_s: float = Field(
        default=3600.0, ge=1, le=7 * 86400,
        description="Seconds a plan may wait at the gate for its approvals; then it expires and "
        "the case parks (ask for a fresh plan). From 1 s to a week; default an hour.",
    )
    catalog: Path | None = Field(
        default=None,
        description="The service catalog: a Backstage catalog-info.yaml file, or a folder read "
        "recursively for *.yaml/*.yml (Component, Group, User). Unset: no components are known "
        "and policies that name owners admit nobody.",
    )
    directory: DirectoryEntries = Field(
        default_factory=list,
        description="Where group membership is read (docs/approvals.md, \"The directory\"): "
        "slack (Slack user groups), catalog (every file of OPSGATE_CATALOG) or catalog:PATH "
        "(a file or folder inside it, e.g. catalog:org), comma-separated. A Group's members, "
        "parent and children and a User's memberOf and Slack id count only in those files. "
        "Unset: no group has members; only OPSGATE_APPROVERS may approve.",
    )
    policy: Path | None = Field(
        default=None,
        description="The approval policy: a .cedar file, or a folder of them. Unset: the "
        "shipped default policy (OPSGATE_APPROVERS, OPSGATE_TWO_PERSON_RISK, "
        "OPSGATE_AUTO_APPROVE) decides; `opsgate policy default` prints it.",
    )


class GatewaySettings(BaseModel):
    """The gateway every side effect goes through: its claims and its Redis keys."""

    gateway_result_ttl_s: int = Field(
        default=86400, ge=1, description="How long Redis keeps a finished call's result."
    )
    gateway_lease_s: float = Field(
        default=30.0, gt=0, description="A claim's lease; must exceed the slowest executor."
    )
    gateway_key_prefix: str = Field(default="opsgate:gw:", description="Prefix of Redis keys.")
    gateway_redis_timeout_s: float = Field(
        default=0.5, gt=0, description="Redis socket and connect timeout of the gateway."
    )


class ExecutorSettings(BaseModel):
    """Executor adapters (docs/executor.md): what a plan's steps may run and call.
    Lists are JSON or comma-separated, e.g.
    ``OPSGATE_SCRIPT_ALLOWLIST=/usr/local/bin/restart-service,echo``."""

    script_allowlist: Names = Field(
        default_factory=list,
        description="Executables script.exec may run: absolute paths or names found on PATH "
        "at start, each optionally as component=executable (the catalog component it changes: "
        "who approves it). Empty: nothing may run.",
    )
    script_env_allow: EnvNames = Field(
        default_factory=list,
        description="Environment variables a script.exec plan may set besides LANG, LC_* and "
        "TZ: names, or prefixes ending in '*', e.g. 'DRAIN_SECONDS,SERVICE_*'.",
    )
    http_allowlist: Names = Field(
        default_factory=list,
        description="URL prefixes http.request and verify probes may call, e.g. "
        "'http://127.0.0.1:8081/', each optionally as component=prefix (the catalog component "
        "its steps change: who approves them). Empty: nothing may be called.",
    )
    traffic_routes: Names = Field(
        default_factory=list,
        description="The component each gateway.flip route moves traffic for, as "
        "component=route, e.g. 'checkout-api=checkout'. A route not named: nobody owns it.",
    )
    kubectl: str = Field(default="kubectl", description="kubectl for k8s.rollout: path or name.")
    traffic_gateway_url: HttpUrl | None = Field(
        default=None, description="Admin URL gateway.flip POSTs to. Unset: gateway.flip refused."
    )
    step_output_limit: int = Field(
        default=4096, ge=256, le=1_048_576,
        description="Bytes of a step's output kept (head and tail) for the timeline.",
    )
