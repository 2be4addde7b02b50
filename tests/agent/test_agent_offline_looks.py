"""How the offline planner looks before it proposes: it finds the case's component in the
catalog and names it, reads what changed, and has the plan template made for it — a rollback
when the component was deployed within six hours before the case opened, else the template the
incident's words pick; without a catalog it looks no further.

The looks are answered as the real ones answer (``CaseLooks.find_components`` on the example
catalog, ``plan_for_case``); the gateway's write answer of ``name_components`` is its shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.offline_looks import ROLLBACK_TEMPLATE, made_plan, next_looks, template_for
from core.catalog.files import load_catalog
from core.catalog.model import Catalog
from core.consumers.planner import choose_template
from core.domain.plan_templates import load_template
from core.domain.plans import plan_problems
from core.investigate.looks import CaseLooks, Sources
from core.investigate.scope import NOTHING_IN_SCOPE, OutOfScope, scope_of
from core.investigate.templates import plan_for_case
from core.investigate.tools import FindArgs

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "catalog"
CATALOG = load_catalog(EXAMPLE)
CASE_ID = "5b1c8d7e-0000-4000-8000-000000000028"
OPENED = datetime(2026, 11, 27, 14, 10, tzinfo=UTC)
INCIDENT = "Payments API returns 500s after the deploy"
Results = dict[str, Any]


def case(*components: str, opened: str = OPENED.isoformat()) -> dict[str, Any]:
    return {"case_id": CASE_ID, "title": INCIDENT, "created_at": opened,
            "components": list(components)}


def changes(*deploys: tuple[str, datetime]) -> dict[str, Any]:
    """``recent_changes``' answer: each (kind, when) a change of payments-api."""
    return {"component": "payments-api", "changes": [
        {"change_id": f"ci-{n}", "kind": kind, "component": "payments-api", "version": "v2.4.0",
         "actor": "ci", "happened_at": at.isoformat(), "source": "generic"}
        for n, (kind, at) in enumerate(deploys)]}


class Looker:
    """Answers the offline planner's looks for one case, as the agent's tools would."""

    def __init__(self, catalog: Any = CATALOG, recent: dict[str, Any] | None = None,
                 named: dict[str, Any] | None = None, kubernetes: Any = None) -> None:
        self.catalog, self.recent, self.named = catalog, recent or changes(), named
        self.kubernetes = kubernetes
        self.components: list[str] = []

    def answer(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        looks = CaseLooks(scope_of(self.catalog, self.components, None), OPENED,
                          Sources(kubernetes=self.kubernetes), self.catalog)
        try:
            if tool == "find_components":
                return looks.find_components(FindArgs(**args))
            if tool == "name_components":
                self.components = list(args["components"])
                return self.named or {"status": "ok", "result": {"case_id": args["case_id"],
                                                                 "components": self.components}}
            if tool == "recent_changes":
                return self.recent
            if tool == "plan_template":
                return plan_for_case(looks, args["template"], None)
        except OutOfScope as refused:  # LookRefused too, as agent/looking.py answers them
            return {"error": refused.message}
        raise AssertionError(f"the offline planner asked for {tool}, which it never should")


def walk(looker: Looker, the_case: dict[str, Any], incident: str = INCIDENT
         ) -> tuple[list[tuple[str, dict[str, Any]]], Results]:
    """Every look the planner takes, in order, until it has none left to take."""
    results: Results = {}
    taken: list[tuple[str, dict[str, Any]]] = []
    while (looks := next_looks(CASE_ID, the_case, results, incident)) is not None:
        assert len(looks) == 1 and len(taken) < 6
        [(tool, args)] = looks
        taken.append((tool, args))
        results[tool] = looker.answer(tool, args)
    return taken, results


# -- the sequence ---------------------------------------------------------------------------------


def test_a_case_without_components_looks_the_service_up_in_the_catalog_first() -> None:
    long = "checkout fails " * 40

    assert next_looks(CASE_ID, case(), {}, long) == [("find_components",
                                                      {"query": long[:300]})]


def test_the_best_component_found_is_named() -> None:
    results = {"find_components": Looker().answer("find_components", {"query": INCIDENT})}

    assert results["find_components"]["components"][0]["name"] == "payments-api"
    assert next_looks(CASE_ID, case(), results, INCIDENT) == [
        ("name_components", {"case_id": CASE_ID, "components": ["payments-api"]})]


def test_a_deploy_shortly_before_the_case_opened_makes_the_plan_a_rollback() -> None:
    looker = Looker(recent=changes(("deploy", OPENED - timedelta(hours=2))))

    taken, results = walk(looker, case(), "payments API errors")

    assert [tool for tool, _ in taken] == ["find_components", "name_components",
                                           "recent_changes", "plan_template"]
    assert taken[2:] == [("recent_changes", {}),
                         ("plan_template", {"template": ROLLBACK_TEMPLATE})]
    # no Kubernetes here: the rollback cannot be made, and the planner says why
    plan, refused = made_plan(results)
    assert plan is None
    assert refused is not None and refused.startswith("no Kubernetes API is configured")


class FakeKubernetes:
    """A cluster's rollout history (no cluster runs here): revision 7 deployed v2.4.0."""

    def rollout_history(self, target: Any, deployment: str | None = None) -> dict[str, Any]:
        return {"deployment": target.workload, "namespace": target.namespace,
                "current_revision": 7, "revisions": [
                    {"revision": 6, "images": {"api": "registry.example.com/payments-api:v2.3.9"},
                     "current": False},
                    {"revision": 7, "images": {"api": "registry.example.com/payments-api:v2.4.0"},
                     "current": True}]}


def test_with_the_clusters_history_the_rollback_returns_to_the_revision_before_the_deploy(
        ) -> None:
    looker = Looker(recent=changes(("deploy", OPENED - timedelta(minutes=8))),
                    kubernetes=FakeKubernetes())

    _, results = walk(looker, case(), "payments API errors")

    plan, refused = made_plan(results)
    assert refused is None and plan is not None
    assert [step["params"] for step in plan["steps"]] == [
        {"operation": "set-image", "namespace": "payments", "deployment": "payments-api",
         "container": "api", "image": "registry.example.com/payments-api:v2.3.9"}]
    assert plan_problems(plan) == []


def test_without_a_recent_deploy_the_incidents_words_pick_the_template() -> None:
    for deploys in ([], [("deploy", OPENED - timedelta(hours=7))],
                    [("deploy", OPENED + timedelta(minutes=5))],
                    [("config", OPENED - timedelta(minutes=30))]):
        looker = Looker(recent=changes(*deploys))

        taken, results = walk(looker, case(), "payments API pods stuck")

        assert taken[-1] == ("plan_template", {"template": "script.restart"})
        plan, refused = made_plan(results)
        assert refused is None and plan is not None
        assert plan["steps"][0]["params"] == {"operation": "restart",
                                              "namespace": "payments",
                                              "deployment": "payments-api"}


def test_a_case_that_names_its_component_reads_what_changed_first() -> None:
    looker = Looker()
    looker.components = ["payments-api"]

    taken, results = walk(looker, case("payments-api"), "payments API is slow")

    assert taken == [("recent_changes", {}), ("plan_template", {"template": "noop"})]
    assert made_plan(results) == (load_template("noop"), None)


# -- when a look fails, or finds nothing ---------------------------------------------------------


def test_without_a_catalog_it_looks_no_further_and_makes_no_plan() -> None:
    looker = Looker(catalog=Catalog.EMPTY)

    taken, results = walk(looker, case())

    assert taken == [("find_components", {"query": INCIDENT})]
    assert results["find_components"] == {"error": "there is no service catalog here "
                                                   "(OPSGATE_CATALOG)"}
    assert made_plan(results) == (None, None)


def test_a_catalog_with_no_match_gets_the_template_the_words_pick() -> None:
    incident = "the datacenter lost its standby region"

    taken, results = walk(Looker(), case(), incident)

    assert results["find_components"]["components"] == []
    assert taken == [("find_components", {"query": incident}),
                     ("plan_template", {"template": "gateway.flip.failover"})]
    assert choose_template(incident) == "gateway.flip.failover"
    assert made_plan(results) == (None, NOTHING_IN_SCOPE)  # made for no component: said why


def test_a_component_that_could_not_be_named_gets_the_words_template() -> None:
    looker = Looker(named={"error": "the case already has a plan at the gate"})

    taken, _ = walk(looker, case(), "payments API regression")

    assert [tool for tool, _ in taken] == ["find_components", "name_components",
                                           "plan_template"]
    assert taken[-1][1] == {"template": "k8s.rollout.canary"}  # "regression": the words'


def test_changes_that_could_not_be_read_leave_the_choice_to_the_words() -> None:
    results = {"recent_changes": {"error": "no change store is available"}}

    assert template_for(case("payments-api"), results, "payments API is slow") == "noop"


# -- the six hours -------------------------------------------------------------------------------


@pytest.mark.parametrize(("happened", "template"), [
    (OPENED - timedelta(hours=6), ROLLBACK_TEMPLATE),  # the window's start counts
    (OPENED, ROLLBACK_TEMPLATE),
    (OPENED - timedelta(hours=6, seconds=1), "noop"),
    (OPENED + timedelta(seconds=1), "noop"),
])
def test_a_deploy_counts_within_the_six_hours_before_the_case_opened(
        happened: datetime, template: str) -> None:
    results = {"recent_changes": changes(("deploy", happened))}

    assert template_for(case("payments-api"), results, "payments API is slow") == template


def test_times_are_read_as_utc_when_they_say_no_zone_and_z_is_utc() -> None:
    naive = {"recent_changes": {"changes": [{"kind": "deploy",
                                             "happened_at": "2026-11-27T13:00:00"}]}}
    zulu = {"recent_changes": {"changes": [{"kind": "deploy",
                                            "happened_at": "2026-11-27T13:00:00Z"}]}}

    assert template_for(case(opened="2026-11-27T14:10:00"), naive, "x") == ROLLBACK_TEMPLATE
    assert template_for(case(opened="2026-11-27T14:10:00Z"), zulu, "x") == ROLLBACK_TEMPLATE


def test_a_time_that_cannot_be_read_is_no_recent_deploy() -> None:
    unreadable = {"recent_changes": {"changes": [{"kind": "deploy", "happened_at": "today"}]}}
    recent = {"recent_changes": changes(("deploy", OPENED - timedelta(hours=1)))}

    assert template_for(case("payments-api"), unreadable, "x") == "noop"
    assert template_for({"components": ["payments-api"]}, recent, "x") == "noop"  # no opening


# -- reading plan_template's answer ------------------------------------------------------------


def test_made_plan_reads_the_plan_or_why_it_could_not_be_made() -> None:
    plan = load_template("noop")

    assert made_plan({}) == (None, None)
    assert made_plan({"plan_template": {"plan": plan, "made_for": "payments-api"}}) == \
        (plan, None)
    assert made_plan({"plan_template": {"error": "payments-api has no Kubernetes deployment"}}) \
        == (None, "payments-api has no Kubernetes deployment")
    assert made_plan({"plan_template": {"plan": "not a plan"}}) == \
        (None, "the template could not be made for this case")
