"""What one case may look at: its catalog components as targets (namespace, selector, metric
labels), the operator's default scope for a case that names none, and nothing at all — never
everything — when neither is there; each refusal a sentence the model can act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.catalog.files import load_catalog
from core.catalog.model import Catalog, Component
from core.investigate.scope import (
    DEFAULT,
    NOTHING_IN_SCOPE,
    OutOfScope,
    Scope,
    Target,
    default_target,
    scope_of,
    target_of,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "catalog"


def component(name: str, *, kubernetes_id: str | None = None, namespace: str | None = None,
              selector: tuple[tuple[str, str], ...] = (),
              metric_labels: tuple[tuple[str, str], ...] = ()) -> Component:
    return Component(name=name, owner="payments-oncall", lifecycle="production", system=None,
                     title=None, kubernetes_id=kubernetes_id, kubernetes_namespace=namespace,
                     kubernetes_selector=selector, links=(), source="catalog-info.yaml",
                     metric_labels=metric_labels)


CATALOG = Catalog.of([
    component("payments-api", kubernetes_id="payments", namespace="payments",
              selector=(("app", "payments-api"),)),
    component("checkout", namespace="shop", selector=(("app", "checkout"), ("tier", "web")),
              metric_labels=(("job", "checkout"), ("namespace", "shop"))),
    component("ledger"),  # in the catalog, but not in Kubernetes
], [], [])

DEFAULT_TARGET = default_target("prod", "team=payments", "env=prod")


# -- components become targets ------------------------------------------------------------------


def test_a_component_is_read_where_the_catalog_says_it_runs() -> None:
    scope = scope_of(CATALOG, ["checkout"], None)

    assert scope.targets == (Target("checkout", "shop", (("app", "checkout"), ("tier", "web")),
                                    (("job", "checkout"), ("namespace", "shop")), "checkout"),)
    assert scope.target(None).selector_text == "app=checkout,tier=web"


def test_metric_labels_default_to_the_service_its_workload_goes_by() -> None:
    payments = scope_of(CATALOG, ["payments-api"], None).target("payments-api")

    assert payments.metric_labels == (("service", "payments"),)  # its kubernetes-id
    assert payments.workload == "payments"
    assert target_of(CATALOG.components["ledger"]).metric_labels == (("service", "ledger"),)


def test_the_example_catalog_reads_as_targets() -> None:
    catalog = load_catalog(EXAMPLE)

    scope = scope_of(catalog, ["payments-api", "search-api"], None)

    assert scope.names() == ("payments-api", "search-api")
    payments = scope.kubernetes("payments-api")
    assert (payments.namespace, payments.selector_text, payments.workload) == \
        ("payments", "app=payments-api", "payments-api")
    assert scope.metrics("search-api").metric_labels == (("service", "search-api"),)


def test_components_the_catalog_does_not_know_are_ignored() -> None:
    scope = scope_of(CATALOG, ["billing", "checkout", "payments"], DEFAULT_TARGET)

    assert scope.names() == ("checkout",)


def test_the_order_the_case_names_its_components_in_is_kept() -> None:
    assert scope_of(CATALOG, ["ledger", "checkout"], None).names() == ("ledger", "checkout")


# -- the default scope, and nothing ---------------------------------------------------------------


def test_a_case_naming_no_known_component_gets_the_default_scope() -> None:
    for named in ([], ["billing"]):
        scope = scope_of(CATALOG, named, DEFAULT_TARGET)

        assert scope.targets == (DEFAULT_TARGET,)
        assert scope.target(None) == Target(DEFAULT, "prod", (("team", "payments"),),
                                            (("env", "prod"),))


def test_the_default_scope_is_read_from_the_operators_settings() -> None:
    assert default_target(None, None, None) is None
    assert default_target(None, "app=x", None) is None  # a selector without a namespace: none
    assert default_target("prod", None, None) == Target(DEFAULT, "prod", (), ())
    assert default_target(None, None, "env=prod,team=pay") == \
        Target(DEFAULT, None, (), (("env", "prod"), ("team", "pay")))
    with pytest.raises(ValueError, match="not key=value labels"):
        default_target("prod", "tier in (web)", None)


def test_no_component_and_no_default_is_an_empty_scope_that_reads_nothing() -> None:
    scope = scope_of(CATALOG, [], None)

    assert scope.empty and scope.names() == ()
    for read in (scope.target, scope.kubernetes, scope.metrics):
        with pytest.raises(OutOfScope) as refused:
            read(None)
        assert refused.value.message == NOTHING_IN_SCOPE
    assert "name the components it concerns" in NOTHING_IN_SCOPE
    with pytest.raises(OutOfScope, match="name the components"):
        scope.target("checkout")  # naming one does not widen an empty scope


# -- choosing a target ---------------------------------------------------------------------------


def test_a_case_of_several_components_must_name_one() -> None:
    scope = scope_of(CATALOG, ["payments-api", "checkout"], None)

    with pytest.raises(OutOfScope) as refused:
        scope.target(None)

    assert refused.value.message == ("this case concerns payments-api, checkout: name one as "
                                     "component")
    assert refused.value.code == "out_of_scope"
    assert scope.target("checkout").namespace == "shop"


def test_a_component_outside_the_case_is_refused_naming_those_inside() -> None:
    scope = scope_of(CATALOG, ["checkout"], None)

    with pytest.raises(OutOfScope) as refused:
        scope.target("payments-api")

    assert refused.value.message == ("'payments-api' is not a component of this case; it "
                                     "concerns checkout")


def test_kubernetes_reads_need_a_namespace() -> None:
    scope = scope_of(CATALOG, ["ledger"], None)

    with pytest.raises(OutOfScope) as refused:
        scope.kubernetes(None)

    assert refused.value.message == ("ledger has no Kubernetes namespace in the catalog "
                                     "(annotation backstage.io/kubernetes-namespace); nothing to "
                                     "read")


def test_metric_reads_need_metric_labels() -> None:
    scope = Scope((Target(DEFAULT, "prod", (), ()),))

    with pytest.raises(OutOfScope) as refused:
        scope.metrics(None)

    assert refused.value.message == ("the default scope names no metric labels (annotation "
                                     "opsgate.dev/metric-labels); no metric or alert can be "
                                     "read for it")
    assert scope.kubernetes(None).namespace == "prod"


def test_a_default_scope_without_a_namespace_reads_metrics_not_kubernetes() -> None:
    scope = scope_of(CATALOG, [], default_target(None, None, "env=prod"))

    assert scope.metrics(None).metric_labels == (("env", "prod"),)
    with pytest.raises(OutOfScope, match="has no Kubernetes namespace"):
        scope.kubernetes(None)
