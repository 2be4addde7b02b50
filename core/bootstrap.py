"""The composition root: builds every opsgate object from settings (tests build it with fakes)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import Engine

from core.cases.service import CaseService
from core.catalog.directory import Directory, as_directory_says
from core.catalog.files import CatalogSource
from core.catalog.model import Catalog
from core.chat import ChatSink, RecordingSink
from core.db.database import make_engine
from core.domain.policy import ApprovalPolicy
from core.evidence.configured import has_metrics_source, promql_bounds
from core.gateway import Gateway, build_gateway
from core.investigate.scope import default_target
from core.mcp.remote import load_servers
from core.policy.files import PolicySource, catalog_problems
from core.policy.judge import GroupMembers
from core.policy.rules import PolicyError
from core.policy.targets import StepOwners
from core.settings import OpsgateSettings, Settings, load_settings
from core.steps.adapters import adapters_from_settings
from core.steps.dry_run import PlanDryRun

if TYPE_CHECKING:
    from uuid import UUID

    from fastapi import FastAPI

    from core.investigate.progress import Investigation
    from core.library import Library
    from core.messaging.consumer import Consumer

ConsumerFactory = Callable[["App"], "Consumer"]
RouteMount = Callable[["App", "FastAPI"], None]


class Connection(Protocol):
    """A long-lived connection an outer layer opens beside the API (Slack Socket Mode)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Extensions:
    """What the outer layers (``agent/``, ``bot/``) plug into every opsgate process; the core
    never imports them. ``consumers`` replaces core consumers by name (the agent plans instead
    of the template planner); ``routes`` mount HTTP routes on the API (Slack events);
    ``chat`` builds the sink the notifier posts through (Slack instead of memory);
    ``socket_mode`` connects to Slack over Socket Mode (``opsgate serve --socket-mode``);
    ``members`` resolves the user groups on the approver list (Slack's, from a cache);
    ``investigation`` shows an agent run's looks and findings as they happen (the case's Slack
    thread; None for a case it cannot show);
    ``settings`` are the outer layers' own settings classes (Slack's, the model's), read with
    core's and found with ``Settings.layer``."""

    consumers: Mapping[str, ConsumerFactory] = field(default_factory=dict)
    routes: tuple[RouteMount, ...] = ()
    chat: Callable[[App], ChatSink] | None = None
    socket_mode: Callable[[App], Connection] | None = None
    members: Callable[[Settings], GroupMembers | None] | None = None
    investigation: Callable[[App, UUID], Investigation | None] | None = None
    settings: tuple[type[OpsgateSettings], ...] = ()


@dataclass
class App:
    """Everything a process of opsgate runs on."""

    settings: Settings
    engine: Engine
    cases: CaseService
    gateway: Gateway
    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    catalog: CatalogSource = field(default_factory=lambda: CatalogSource(None))
    policies: PolicySource | None = None  # OPSGATE_POLICY's files; None: the default decides
    chat: ChatSink = field(default_factory=RecordingSink)  # the notifier posts here
    extensions: Extensions = field(default_factory=Extensions)

    @cached_property
    def library(self) -> Library:
        """The librarian's index and recall, with the configured embedding model."""
        from core.library import Library
        from core.library.embeddings import embedder_for

        return Library(self.engine, embedder_for(self.settings))

    def close(self) -> None:
        self.gateway.close()
        self.engine.dispose()


def policy_from_settings(settings: Settings, members: GroupMembers | None = None,
                         catalog: CatalogSource | None = None,
                         policies: PolicySource | None = None) -> ApprovalPolicy:
    """The approval policy of ``settings``: the Cedar policies of ``OPSGATE_POLICY`` (else the
    shipped default), judged with the catalog of ``OPSGATE_CATALOG`` as it is at each click and
    as ``OPSGATE_DIRECTORY`` says who is in which group. ``members`` resolves Slack user groups
    (the Slack front end passes its cached resolver; none: groups have no members; without
    ``slack`` in the directory, only the groups OPSGATE_APPROVERS lists). ``PolicyError`` or
    ``CatalogError`` when either cannot be used, or when the policies name a group or
    component the catalog does not have."""
    source = catalog or CatalogSource(settings.catalog)
    if policies is None and settings.policy is not None:
        policies = PolicySource(settings.policy)
    rules = None if policies is None else policies.current()
    if rules is not None:
        unknown = catalog_problems(rules, source.current())
        if unknown:
            raise PolicyError(unknown)
    directory = Directory.parse(settings.directory)

    def gate_catalog() -> Catalog:
        return as_directory_says(source.current(), directory, settings.catalog)

    policy = ApprovalPolicy(approvers=frozenset(settings.approvers),
                            two_person_risk=settings.two_person_risk,
                            auto_approve=settings.auto_approve,
                            auto_approve_max_risk=settings.auto_approve_max_risk,
                            approval_ttl_s=settings.approval_ttl_s, rules=rules,
                            catalog=gate_catalog,
                            policies=None if policies is None else policies.current,
                            step_owners=step_owners(settings))
    if members is None:
        return policy
    return replace(policy, members=members if directory.slack
                   else listed_only(members, frozenset(settings.approvers)))


def listed_only(members: GroupMembers, approvers: frozenset[str]) -> GroupMembers:
    """Slack user group members when Slack is not the directory: only the groups
    OPSGATE_APPROVERS lists have members (the operator named them there)."""
    def listed(group: str) -> Collection[str]:
        return members(group) if group in approvers else ()

    return listed


def step_owners(settings: Settings) -> StepOwners:
    """The component each allow-list entry acts on (``component=entry`` in
    ``OPSGATE_HTTP_ALLOWLIST``, ``OPSGATE_SCRIPT_ALLOWLIST``, ``OPSGATE_TRAFFIC_ROUTES``; a
    server's ``component`` in ``OPSGATE_MCP_SERVERS``): whose steps through it are."""
    servers = load_servers(settings.mcp_servers) if settings.mcp_servers else {}
    return StepOwners.of(urls=settings.http_allowlist, scripts=settings.script_allowlist,
                         routes=settings.traffic_routes,
                         mcp_servers={name: s.component for name, s in servers.items()})


def bootstrap(settings: Settings | None = None, *, engine: Engine | None = None,
              members: GroupMembers | None = None, chat: ChatSink | None = None,
              extensions: Extensions | None = None) -> App:
    """Wire opsgate from ``settings`` (the environment by default), with what ``extensions``
    plug in; an explicit ``chat`` wins over the extensions' sink."""
    extensions = extensions or Extensions()
    settings = settings or load_settings(*extensions.settings)
    for layer in extensions.settings:  # a mistake in a layer's settings stops the start too
        settings.layer(layer)
    if members is None and extensions.members is not None:
        members = extensions.members(settings)
    catalog = CatalogSource(settings.catalog)
    policies = None if settings.policy is None else PolicySource(settings.policy)
    policy = policy_from_settings(settings, members, catalog, policies)
    if settings.kubeconfig:  # a kubeconfig that cannot be used stops the start, in one line
        from core.investigate.sources import kubernetes_reader

        kubernetes_reader(settings.kubeconfig, settings.kube_context)
    engine = engine or make_engine(settings.database_url, pool_size=settings.db_pool_size)
    app = App(settings=settings, engine=engine,
              cases=CaseService(engine, tenant=settings.tenant, policy=policy,
                                reads_metrics=has_metrics_source(settings),
                                promql=promql_bounds(settings) if settings.prometheus_url
                                else None,
                                dry_run=PlanDryRun(lambda: adapters_from_settings(settings)),
                                default_scope=default_target(
                                    settings.default_namespace, settings.default_selector,
                                    settings.default_metric_labels)),
              gateway=build_gateway(settings, engine), policy=policy, catalog=catalog,
              policies=policies,
              chat=chat or RecordingSink(), extensions=extensions)
    if chat is None and extensions.chat is not None:
        app.chat = extensions.chat(app)
    return app
