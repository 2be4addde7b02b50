"""What one case may look at: its catalog components as the investigator reads them (namespace,
Kubernetes label selector, metric labels), or the operator's default scope for a case that names
none. Fail closed: no components and no default means nothing may be read, never everything.

Pure: the readers (``core/investigate/*``) ask ``Scope`` before they send anything."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.catalog.descriptors import label_pairs
from core.catalog.model import Catalog, Component
from core.errors import Unprocessable

Labels = tuple[tuple[str, str], ...]
DEFAULT = "the default scope"


class OutOfScope(Unprocessable):
    """A read the case's scope does not allow; the message is a sentence the model can act on."""

    code = "out_of_scope"


@dataclass(frozen=True)
class Target:
    """One thing a case may look at: a component (or the default scope) and where it lives."""

    name: str
    namespace: str | None
    selector: Labels  # Kubernetes labels its workloads carry (empty: the whole namespace)
    metric_labels: Labels  # labels every metric and alert of it carries (empty: none readable)
    workload: str | None = None  # its Deployment's name (kubernetes-id, else its name)
    container: str | None = None

    @property
    def selector_text(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.selector)


@dataclass(frozen=True)
class Scope:
    """The targets of one case; empty when it names no component and no default is set."""

    targets: tuple[Target, ...]

    @property
    def empty(self) -> bool:
        return not self.targets

    def names(self) -> tuple[str, ...]:
        return tuple(target.name for target in self.targets)

    def target(self, name: str | None) -> Target:
        """The target named ``name`` (a component of the case); the only one when ``name`` is
        None and there is one. ``OutOfScope`` otherwise, saying which names there are."""
        if self.empty:
            raise OutOfScope(NOTHING_IN_SCOPE)
        if name is None and len(self.targets) == 1:
            return self.targets[0]
        for target in self.targets:
            if target.name == name:
                return target
        names = ", ".join(self.names())
        if name is None:
            raise OutOfScope(f"this case concerns {names}: name one as component")
        raise OutOfScope(f"{name!r} is not a component of this case; it concerns {names}")

    def kubernetes(self, name: str | None) -> Target:
        """The target to read in Kubernetes: it must have a namespace."""
        target = self.target(name)
        if target.namespace is None:
            raise OutOfScope(f"{target.name} has no Kubernetes namespace in the catalog "
                             "(annotation backstage.io/kubernetes-namespace); nothing to read")
        return target

    def metrics(self, name: str | None) -> Target:
        """The target to read metrics or alerts of: it must name its metric labels."""
        target = self.target(name)
        if not target.metric_labels:
            raise OutOfScope(f"{target.name} names no metric labels (annotation "
                             "opsgate.dev/metric-labels); no metric or alert can be read for it")
        return target


NOTHING_IN_SCOPE = ("this case names no catalog component and no default scope is set: name "
                    "the components it concerns (name_components) before reading the service")


def target_of(component: Component) -> Target:
    """A catalog component as the investigator reads it. Metric labels default to the
    ``service`` label its workload goes by (``service=payments-api``)."""
    labels = component.metric_labels or (("service", component.workload),)
    return Target(component.name, component.kubernetes_namespace, component.kubernetes_selector,
                  labels, component.workload)


def scope_of(catalog: Catalog, components: Iterable[str], default: Target | None) -> Scope:
    """The scope of a case naming ``components`` (those the catalog knows), else ``default``."""
    known = [catalog.components[name] for name in components if name in catalog.components]
    if known:
        return Scope(tuple(target_of(component) for component in known))
    return Scope(() if default is None else (default,))


def metric_scopes(scope: Scope) -> tuple[Labels, ...]:
    """The metric labels of each target of ``scope`` that names them: the series a metric
    check of the case may select (``core/domain/promql.py``'s ``check_component_query``)."""
    return tuple(target.metric_labels for target in scope.targets if target.metric_labels)


def default_target(namespace: str | None, selector: str | None,
                   metric_labels: str | None) -> Target | None:
    """The operator's default scope (``OPSGATE_DEFAULT_*``); None when none of it is set."""
    if namespace is None and not metric_labels:
        return None
    return Target(DEFAULT, namespace, _labels(selector), _labels(metric_labels))


def _labels(text: str | None) -> Labels:
    pairs = label_pairs(text or "")
    if pairs is None:
        raise ValueError(f"{text!r} is not key=value labels separated by commas")
    return pairs


def matches(labels: Mapping[str, str], wanted: Labels) -> bool:
    """Whether a series' or an alert's ``labels`` carry every one of ``wanted``."""
    return all(labels.get(key) == value for key, value in wanted)
