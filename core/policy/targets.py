"""What each plan step changes, and whose it is: a ``k8s.rollout`` or ``k8s.scale`` is its
namespace/deployment, a ``k8s.configmap`` or ``flag.set`` the components living in its namespace;
an ``http.request``, ``script.exec``, ``mcp.call`` or ``gateway.flip`` is the component its
allow-list entry names (``StepOwners``). A target the catalog does not list belongs to the
components the catalog places in its namespace; anything else is unowned, and nobody approves a
plan with an unowned step while a catalog decides. What a case claims is never a substitute.

Pure: the catalog and the allow-lists' components are read from memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from core.catalog.model import Catalog, Component
from core.domain.plans import ParsedPlan, PlanStep, StepAction
from core.domain.targets import step_target

_PORTS = {"http": 80, "https": 443}


def owned_entry(entry: str) -> tuple[str | None, str]:
    """An allow-list entry as written, ``payments-api=https://pay.example/admin/``: the component
    it acts on (None when it names none) and the entry itself."""
    name, sep, rest = entry.partition("=")
    if sep and name and _is_component_name(name) and rest:
        return name, rest
    return None, entry


def _is_component_name(name: str) -> bool:
    return name[0].isalnum() and all(c.isalnum() or c in "-_." for c in name) and len(name) <= 63


@dataclass(frozen=True)
class StepOwners:
    """The component each allow-list entry acts on: URL prefixes (``OPSGATE_HTTP_ALLOWLIST``),
    executables (``OPSGATE_SCRIPT_ALLOWLIST``), MCP servers (``component`` in
    ``OPSGATE_MCP_SERVERS``) and traffic-gateway routes (``OPSGATE_TRAFFIC_ROUTES``). An entry
    without a component is not here: its steps are unowned."""

    urls: tuple[tuple[str, str], ...] = ()  # (prefix, component)
    scripts: tuple[tuple[str, str], ...] = ()  # (executable as allow-listed, component)
    mcp_servers: tuple[tuple[str, str], ...] = ()  # (server, component)
    routes: tuple[tuple[str, str], ...] = ()  # (route, component)

    @classmethod
    def of(cls, *, urls: Sequence[str] = (), scripts: Sequence[str] = (),
           routes: Sequence[str] = (), mcp_servers: Mapping[str, str | None] | None = None
           ) -> StepOwners:
        """From the allow-lists as written (``component=entry``)."""
        def named(entries: Sequence[str]) -> tuple[tuple[str, str], ...]:
            return tuple((entry, name) for name, entry in map(owned_entry, entries) if name)
        servers = tuple((s, c) for s, c in (mcp_servers or {}).items() if c)
        return cls(named(urls), named(scripts), servers, named(routes))

    def of_url(self, url: str) -> str | None:
        """The component of the longest prefix covering ``url``; None: no entry with one."""
        covering = [(len(prefix), name) for prefix, name in self.urls if _covers(prefix, url)]
        return max(covering)[1] if covering else None

    def of_script(self, argv0: str) -> str | None:
        return dict(self.scripts).get(argv0)

    def of_server(self, server: str) -> str | None:
        return dict(self.mcp_servers).get(server)

    def of_route(self, route: str) -> str | None:
        return dict(self.routes).get(route)


NO_STEP_OWNERS = StepOwners()


@dataclass(frozen=True)
class Target:
    """What one step changes (``what``, in words) and the components it is; ``unowned`` when
    the catalog names nobody for it."""

    step: PlanStep
    what: str
    components: tuple[Component, ...]

    @property
    def unowned(self) -> bool:
        return not self.components

    @property
    def sentence(self) -> str:
        """"step 2 (http.request) changes the service behind POST …, which no catalog component
        owns"."""
        return f"{self.step.label} changes {self.what}, which no catalog component owns"


def plan_targets(plan: ParsedPlan, catalog: Catalog,
                 owners: StepOwners = NO_STEP_OWNERS) -> tuple[Target, ...]:
    """The target of every step and rollback step that changes something (a ``noop`` changes
    nothing), each with the components it is."""
    return tuple(Target(step, step_target(str(step.action), step.params),
                        step_components(step.action, step.params, catalog, owners))
                 for step in (*plan.steps, *plan.rollback) if step.action is not StepAction.NOOP)


def step_components(action: StepAction, params: Mapping[str, Any], catalog: Catalog,
                    owners: StepOwners = NO_STEP_OWNERS) -> tuple[Component, ...]:
    """The components one step changes: its Kubernetes object's (else its namespace's), or
    its allow-list entry's; none when nobody can say."""
    if action in (StepAction.K8S_ROLLOUT, StepAction.K8S_SCALE):
        namespace, name = params.get("namespace"), params.get("deployment")
        if not (isinstance(namespace, str) and isinstance(name, str)):
            return ()
        return catalog.by_kubernetes(namespace, name) or _living_in(catalog, namespace)
    if action in (StepAction.K8S_CONFIGMAP, StepAction.FLAG_SET):
        # a ConfigMap or a FeatureFlag is named by no component: its namespace's components own it
        namespace = params.get("namespace")
        return _living_in(catalog, namespace) if isinstance(namespace, str) else ()
    named = _entry_component(action, params, owners)
    component = catalog.component(named) if named else None
    return (component,) if component is not None else ()


def _entry_component(action: StepAction, params: Mapping[str, Any],
                     owners: StepOwners) -> str | None:
    def text(key: str) -> str | None:
        value = params.get(key)
        return value if isinstance(value, str) else None

    if action is StepAction.HTTP_REQUEST:
        url = text("url")
        return owners.of_url(url) if url else None
    if action is StepAction.SCRIPT_EXEC:
        argv = params.get("argv")
        first = argv[0] if isinstance(argv, list) and argv else None
        return owners.of_script(first) if isinstance(first, str) else None
    if action is StepAction.MCP_CALL:
        server = text("server")
        return owners.of_server(server) if server else None
    if action is StepAction.GATEWAY_FLIP:
        route = text("route")
        return owners.of_route(route) if route else None
    return None


def _living_in(catalog: Catalog, namespace: str) -> tuple[Component, ...]:
    """The components the catalog places in ``namespace`` (``backstage.io/kubernetes-namespace``):
    an object there that no component names is theirs. A component without the annotation
    places nothing."""
    return tuple(c for c in catalog.components.values() if c.kubernetes_namespace == namespace)


def _covers(prefix: str, url: str) -> bool:
    """Whether ``url`` is under ``prefix`` as the http allow-list reads it: same scheme, host
    and port, a path under the prefix's on a segment boundary; never with credentials."""
    try:
        want, got = urlsplit(prefix), urlsplit(url)
        origins = [(u.scheme, (u.hostname or "").lower(), u.port or _PORTS.get(u.scheme))
                   for u in (want, got)]
    except ValueError:
        return False
    if origins[0] != origins[1] or got.username or got.password or not got.hostname:
        return False
    base = want.path or "/"
    path = got.path or "/"
    if "/." in path or "%" in path:  # the adapter refuses dot segments and encoded slashes
        return False
    if base.endswith("/"):
        return path.startswith(base)
    return path == base or path.startswith(base + "/")
