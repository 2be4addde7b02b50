"""Plan templates made for the case's component: a rollback to the revision before the last
change (each changed container's image set back, or an undo to that revision), a restart of its
deployment, and refusals with the reason when the template cannot be made — never a plan the
guard or the k8s.rollout adapter would refuse, whatever the cluster's rollout history says.

The Kubernetes reader is a fake (no cluster runs here): it answers a rollout history shaped as
``KubernetesReads.rollout_history`` answers it (``core/investigate/kube_answers.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.catalog.model import Catalog, Component
from core.domain.plan_templates import load_template, template_names
from core.domain.plans import plan_problems
from core.investigate.looks import CaseLooks, LookRefused, Sources
from core.investigate.scope import OutOfScope, Target, default_target, scope_of
from core.investigate.templates import Revision, plan_for_case, revisions_of, rollback_plan
from core.steps.adapters.k8s import RolloutParams

ROLLBACK = "k8s.rollout.canary"
OPENED = datetime(2026, 11, 27, 14, 10, tzinfo=UTC)


class FakeKubernetes:
    """A cluster's rollout history as the reader answers it; remembers what it was asked."""

    def __init__(self, history: Any) -> None:
        self.history = history
        self.asked: list[tuple[Target, str | None]] = []

    def rollout_history(self, target: Target, deployment: str | None = None) -> Any:
        self.asked.append((target, deployment))
        return self.history


def component(name: str, *, kubernetes_id: str | None = None,
              namespace: str | None = None) -> Component:
    return Component(name=name, owner="payments-oncall", lifecycle="production", system=None,
                     title=None, kubernetes_id=kubernetes_id, kubernetes_namespace=namespace,
                     kubernetes_selector=(("app", kubernetes_id or name),), links=(),
                     source="catalog-info.yaml")


CATALOG = Catalog.of([
    component("payments-api", namespace="payments"),
    component("checkout", kubernetes_id="checkout-web", namespace="shop"),
    component("ledger"),  # not in Kubernetes
    component("Billing_API", namespace="Billing Prod"),  # names Kubernetes would not take
], [], [])


def revision(number: Any, current: bool = False, **images: str) -> dict[str, Any]:
    return {"revision": number, "replicaset": f"payments-api-{number}", "images": images,
            "created": "2026-11-27T14:02:00Z", "change_cause": "ci: deploy",
            "replicas": 3 if current else 0, "current": current}


def history(*revisions: dict[str, Any], current: int | None = None) -> dict[str, Any]:
    return {"deployment": "payments-api", "namespace": "payments", "current_revision": current,
            "revisions": list(revisions)}


SEVEN_AFTER_SIX = history(
    revision(5, app="registry.example.com/payments-api:v2.2", proxy="envoyproxy/envoy:v1.29"),
    revision(6, app="registry.example.com/payments-api:v2.3", proxy="envoyproxy/envoy:v1.29"),
    revision(7, True, app="registry.example.com/payments-api:v2.4",
             proxy="envoyproxy/envoy:v1.30"),
    current=7)


def looks(components: list[str], kubernetes: Any = None, *, catalog: Catalog = CATALOG,
          default: Target | None = None) -> CaseLooks:
    return CaseLooks(scope_of(catalog, components, default), OPENED,
                     Sources(kubernetes=kubernetes), catalog)


def made(answer: dict[str, Any]) -> dict[str, Any]:
    """The plan of ``answer``, after checking it as the guard and the adapter will."""
    plan = answer["plan"]
    assert plan_problems(plan) == []
    for params in rollout_params(plan):
        RolloutParams.model_validate(params)
    return plan


def rollout_params(plan: dict[str, Any]) -> list[dict[str, Any]]:
    rollback = plan["rollback"]
    steps = [*plan["steps"], *rollback.get("steps", [rollback])]
    return [step["params"] for step in steps if step["action"] == "k8s.rollout"]


def refusal(case: CaseLooks, template: str = ROLLBACK, name: str | None = None) -> str:
    with pytest.raises(LookRefused) as refused:
        plan_for_case(case, template, name)
    return refused.value.message


# -- a rollback to the revision before the last change -------------------------------------------


def test_a_rollback_sets_each_changed_container_back_and_its_rollback_sets_it_forward() -> None:
    kubernetes = FakeKubernetes(SEVEN_AFTER_SIX)

    answer = plan_for_case(looks(["payments-api"], kubernetes), ROLLBACK, None)

    plan = made(answer)
    assert (answer["made_for"], answer["from_revision"], answer["to_revision"]) == \
        ("payments-api", 7, 6)
    assert [step["params"] for step in plan["steps"]] == [
        {"operation": "set-image", "namespace": "payments", "deployment": "payments-api",
         "container": "app", "image": "registry.example.com/payments-api:v2.3"},
        {"operation": "set-image", "namespace": "payments", "deployment": "payments-api",
         "container": "proxy", "image": "envoyproxy/envoy:v1.29"}]
    assert [step["params"] for step in plan["rollback"]["steps"]] == [
        {"operation": "set-image", "namespace": "payments", "deployment": "payments-api",
         "container": "app", "image": "registry.example.com/payments-api:v2.4"},
        {"operation": "set-image", "namespace": "payments", "deployment": "payments-api",
         "container": "proxy", "image": "envoyproxy/envoy:v1.30"}]
    assert plan["title"] == ("Roll payments-api back to revision 6 (registry.example.com/"
                             "payments-api:v2.3, envoyproxy/envoy:v1.29) from revision 7")
    assert plan["verify"] == load_template(ROLLBACK)["verify"]
    assert "prod" not in str(plan["steps"]) and "app-canary" not in str(plan)
    assert [(target.name, deployment) for target, deployment in kubernetes.asked] == \
        [("payments-api", None)]


def test_only_containers_whose_image_changed_are_set_back() -> None:
    kubernetes = FakeKubernetes(history(
        revision(6, app="payments-api:v2.3", proxy="envoy:v1.29"),
        revision(7, True, app="payments-api:v2.4", proxy="envoy:v1.29"), current=7))

    plan = made(plan_for_case(looks(["payments-api"], kubernetes), ROLLBACK, None))

    assert [(s["params"]["container"], s["params"]["image"]) for s in plan["steps"]] == \
        [("app", "payments-api:v2.3")]


def test_the_deployment_is_the_components_kubernetes_id() -> None:
    kubernetes = FakeKubernetes(history(revision(1, app="shop/checkout:1"),
                                        revision(2, True, app="shop/checkout:2")))

    plan = made(plan_for_case(looks(["checkout"], kubernetes), ROLLBACK, None))

    assert {(p["namespace"], p["deployment"]) for p in rollout_params(plan)} == \
        {("shop", "checkout-web")}


def test_the_same_images_roll_back_with_an_undo_to_the_earlier_revision() -> None:
    kubernetes = FakeKubernetes(history(revision(6, app="payments-api:v2.3"),
                                        revision(7, True, app="payments-api:v2.3")))

    answer = plan_for_case(looks(["payments-api"], kubernetes), ROLLBACK, None)

    plan = made(answer)
    assert [s["params"] for s in plan["steps"]] == [
        {"operation": "undo", "namespace": "payments", "deployment": "payments-api",
         "to_revision": 6}]
    assert [s["params"] for s in plan["rollback"]["steps"]] == [
        {"operation": "undo", "namespace": "payments", "deployment": "payments-api",
         "to_revision": 7}]
    assert plan["title"] == "Roll payments-api back to revision 6 (revision 6) from revision 7"


def test_without_a_current_mark_the_newest_revision_is_the_current_one() -> None:
    kubernetes = FakeKubernetes([revision(3, app="a:3"), revision(2, app="a:2")])  # a bare list

    answer = plan_for_case(looks(["payments-api"], kubernetes), ROLLBACK, None)

    made(answer)
    assert (answer["from_revision"], answer["to_revision"]) == (3, 2)


def test_a_rollback_goes_to_the_revision_just_before_the_current_one() -> None:
    kubernetes = FakeKubernetes(history(revision(2, app="a:2"), revision(9, app="a:9"),
                                        revision(4, True, app="a:4"), revision(3, app="a:3")))

    answer = plan_for_case(looks(["payments-api"], kubernetes), ROLLBACK, None)

    assert (answer["from_revision"], answer["to_revision"]) == (4, 3)
    assert made(answer)["steps"][0]["params"]["image"] == "a:3"


# -- rollbacks that cannot be made ---------------------------------------------------------------


def test_no_earlier_revision_is_refused() -> None:
    for answered in (history(revision(1, True, app="a:1")), history(), {}, [], None):
        message = refusal(looks(["payments-api"], FakeKubernetes(answered)))

        assert message == ("deployment payments/payments-api has no revision before its "
                           "current one to return to; a rollback cannot be made")


def test_no_kubernetes_source_is_refused() -> None:
    message = refusal(looks(["payments-api"], None))

    assert message == ("no Kubernetes API is configured, so the revision payments-api ran "
                       "before its last change is unknown; a rollback cannot be made")


def test_a_component_without_a_deployment_is_refused() -> None:
    kubernetes = FakeKubernetes(SEVEN_AFTER_SIX)

    for case in (looks(["ledger"], kubernetes),
                 looks([], kubernetes, default=default_target("prod", None, "env=prod"))):
        for template in (ROLLBACK, "script.restart"):
            assert "has no Kubernetes deployment in the catalog" in refusal(case, template)
    assert kubernetes.asked == []


def test_a_component_whose_catalog_names_kubernetes_would_not_take_is_refused() -> None:
    case = looks(["Billing_API"], FakeKubernetes(SEVEN_AFTER_SIX))

    for template in (ROLLBACK, "script.restart"):
        message = refusal(case, template)

        assert message.startswith("Billing_API's deployment 'Billing Prod'/'Billing_API' in "
                                  "the catalog is not a Kubernetes namespace and name")


def test_a_case_without_a_component_cannot_have_a_change_made_for_it() -> None:
    with pytest.raises(OutOfScope, match="name the components"):
        plan_for_case(looks([], FakeKubernetes(SEVEN_AFTER_SIX)), ROLLBACK, None)
    with pytest.raises(OutOfScope, match="name one as component"):
        plan_for_case(looks(["payments-api", "checkout"]), "script.restart", None)


def rollback_of(*revisions: dict[str, Any], name: str = "payments-api") -> dict[str, Any]:
    return plan_for_case(looks([name], FakeKubernetes(history(*revisions))), ROLLBACK, None)


def refused_rollback(*revisions: dict[str, Any]) -> str:
    return refusal(looks(["payments-api"], FakeKubernetes(history(*revisions))))


def test_an_earlier_image_that_is_no_image_reference_is_refused() -> None:
    message = refused_rollback(revision(6, app="registry.example.com/app:v1 --force"),
                               revision(7, True, app="registry.example.com/app:v2"))

    assert message == ("revision 6's image 'registry.example.com/app:v1 --force' of container "
                       "'app' is not an image reference; a rollback cannot be made")


def test_a_current_image_that_is_no_image_reference_is_refused_for_the_rollback() -> None:
    message = refused_rollback(revision(6, app="app:v1"), revision(7, True, app="App:V2"))

    assert message == ("revision 7's image 'App:V2' of container 'app' is not an image "
                       "reference; a rollback cannot be made")


def test_a_container_name_kubernetes_would_not_take_is_refused() -> None:
    for name in ("App", "side.car", "-n", "x" * 64):
        message = refused_rollback(revision(6, **{name: "app:v1"}),
                                   revision(7, True, **{name: "app:v2"}))

        assert message.startswith(f"container {name!r} of revision 6 is not a Kubernetes "
                                  "container name")


def test_a_revision_kubectl_cannot_return_to_is_refused() -> None:
    for earlier, current in ((-6, -5), (0, 1), (2**31 - 1, 2**31), (2**63, 2**63 + 1)):
        message = refused_rollback(revision(earlier, app="a:1"), revision(current, True,
                                                                          app="a:1"))

        assert "is not a revision Kubernetes gives (1 to 2147483647)" in message
    assert made(rollback_of(revision(2**31 - 2, app="a:1"), revision(
        2**31 - 1, True, app="a:1")))["rollback"]["steps"][0]["params"]["to_revision"] == \
        2**31 - 1


def test_a_history_that_contradicts_itself_is_refused() -> None:
    twice = refused_rollback(revision(6, app="a:6"), revision(6, app="a:x"),
                             revision(7, True, app="a:7"))
    both = refused_rollback(revision(6, True, app="a:6"), revision(7, True, app="a:7"))

    assert twice == ("the rollout history tells revision 6 twice, with different images; a "
                     "rollback cannot be made")
    assert both == "the rollout history marks revisions 6, 7 all current; a rollback cannot be made"
    told_twice_alike = [revision(6, app="a:6"), revision(7, True, app="a:7")] * 2
    assert made(rollback_of(*told_twice_alike))["steps"][0]["params"]["image"] == "a:6"


def test_odd_fields_of_a_revision_are_not_read_as_true_or_as_images() -> None:
    rows = [{"revision": 6, "images": {"app": "a:6", "proxy": None, "gone": 5}},
            {"revision": 7, "images": {"app": "a:7", "proxy": "envoy:1", "gone": 6},
             "current": "false"},
            {"revision": 8, "images": ["a:8"], "current": True}]

    found = revisions_of(rows)

    assert [(r.number, dict(r.images), r.current) for r in found] == \
        [(6, {"app": "a:6"}, False), (7, {"app": "a:7", "proxy": "envoy:1"}, False),
         (8, {}, True)]
    assert [revisions_of([revision(n, app="a:1")]) for n in (True, 6.5, "6.5", " 6", "٦")] == \
        [[]] * 5


def test_more_changed_containers_than_a_plan_has_steps_is_refused() -> None:
    message = refused_rollback(revision(6, **{f"c{n}": "a:6" for n in range(51)}),
                               revision(7, True, **{f"c{n}": "a:7" for n in range(51)}))

    assert message == ("revision 6 differs from revision 7 in 51 containers, more than a "
                       "plan's 50 steps; a rollback cannot be made")
    plan = made(rollback_of(revision(6, **{f"c{n}": "a:6" for n in range(50)}),
                            revision(7, True, **{f"c{n}": "a:7" for n in range(50)})))
    assert len(plan["steps"]) == len(plan["rollback"]["steps"]) == 50


def test_a_title_of_long_images_is_cut_to_the_schemas_length() -> None:
    images = {name: f"registry.example.com/{name}:" + "v" * 120 for name in ("api", "worker")}

    plan = made(rollback_of(revision(6, **images), revision(7, True, api="a:7", worker="w:7")))

    assert len(plan["title"]) == 200
    assert plan["title"].startswith("Roll payments-api back to revision 6 (registry.example.com/")
    assert plan["title"].endswith("…) from revision 7")


# -- the other templates ----------------------------------------------------------------------


def test_a_restart_is_a_rollout_restart_of_the_components_deployment() -> None:
    answer = plan_for_case(looks(["checkout"]), "script.restart", None)

    plan = made(answer)
    assert answer["made_for"] == "checkout"
    assert plan["steps"] == [{"action": "k8s.rollout", "timeout_s": 600, "retry": 1,
                              "params": {"operation": "restart", "namespace": "shop",
                                         "deployment": "checkout-web"}}]
    assert plan["title"] == "Restart checkout (deployment shop/checkout-web)"
    template = load_template("script.restart")
    assert (plan["rollback"], plan["verify"]) == (template["rollback"], template["verify"])


def test_noop_stays_noop_even_for_a_case_without_components() -> None:
    for case, named in ((looks([]), "the case"), (looks(["payments-api", "checkout"]),
                                                  "payments-api, checkout")):
        answer = plan_for_case(case, "noop", None)

        assert made(answer) == load_template("noop")
        assert answer["made_for"] == named


def test_a_template_that_names_no_kubernetes_object_is_the_template_for_the_component() -> None:
    answer = plan_for_case(looks(["payments-api"]), "gateway.flip.failover", None)

    assert made(answer) == load_template("gateway.flip.failover")
    assert answer["made_for"] == "payments-api"


def test_without_a_catalog_every_template_is_as_the_operator_wrote_it() -> None:
    for name in template_names():
        answer = plan_for_case(looks([], catalog=Catalog.EMPTY), name, None)

        assert made(answer) == load_template(name)
        assert answer["made_for"] == "no catalog: the template as the operator wrote it"


def test_an_unknown_template_is_refused_naming_the_templates() -> None:
    message = refusal(looks(["payments-api"]), "k8s.rollback")

    assert message == ("there is no plan template 'k8s.rollback'; there are "
                       "gateway.flip.failover, k8s.rollout.canary, noop, script.restart")


# -- reading a rollout history ------------------------------------------------------------------


def test_revisions_are_read_oldest_first_skipping_what_cannot_be_read() -> None:
    rows = [revision(7, True, app="a:7"), {"images": {"app": "a:0"}}, "7",
            revision("6", app="a:6"), revision(None, app="a:x"), revision("six", app="a:x")]

    found = revisions_of({"revisions": rows})

    assert found == [Revision(6, {"app": "a:6"}, "2026-11-27T14:02:00Z", "ci: deploy", False),
                     Revision(7, {"app": "a:7"}, "2026-11-27T14:02:00Z", "ci: deploy", True)]
    assert revisions_of("not a history") == []
    assert revisions_of(None) == []


def test_rollback_plan_names_the_revision_when_no_image_differs() -> None:
    target = Target("payments-api", "payments", (), (), "payments-api")
    plan = rollback_plan(load_template(ROLLBACK), target,
                         Revision(7, {"app": "a:1"}, None, None, True),
                         Revision(6, {"app": "a:1", "gone": "b:1"}, None, None, False))

    assert plan["steps"][0]["params"]["to_revision"] == 6
    assert plan_problems(plan) == []


# -- whatever a cluster could report ---------------------------------------------------------------

def made_or_refused(case: CaseLooks) -> tuple[dict[str, Any], str | None]:
    try:
        return plan_for_case(case, ROLLBACK, None), None
    except (LookRefused, OutOfScope) as refused:
        return {}, refused.message


ODD_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(max_size=600),
    st.sampled_from(["", " ", "registry.example.com/app:v1 ", "app:v1; rm -rf /", "--help",
                     "-n=kube-system", "Registry.Example.com/App:V1", "app@sha256:xyz",
                     "a" * 600, "x/" * 300, "app:\nv2", "\x00", "é/app:1", "app:" + "1" * 200]),
)
IMAGE = st.one_of(
    st.sampled_from(["registry.example.com/payments-api:v2.3", "nginx", "nginx:1.27",
                     "localhost:5000/a/b:c", "ghcr.io/org/app@sha256:" + "a" * 64]),
    st.from_regex(r"\A[a-z0-9]{1,20}(/[a-z0-9]{1,20}){0,3}(:[A-Za-z0-9_.-]{1,20})?\Z"),
    ODD_TEXT,
)
CONTAINER = st.one_of(st.sampled_from(["app", "proxy", "App", "side.car", "side_car", "-x", "",
                                       "a" * 64, "x y"]),
                      st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z"), ODD_TEXT)
NUMBER = st.one_of(st.integers(-3, 12), st.integers(), st.sampled_from([2**31 - 1, 2**31, 2**63]),
                   st.integers(-5, 12).map(str), st.sampled_from(["7 ", "+7", "0x7", "", "1e3"]),
                   st.floats(), st.booleans(), st.none(), ODD_TEXT)
ROW = st.one_of(
    st.fixed_dictionaries({"revision": NUMBER,
                           "images": st.one_of(st.dictionaries(CONTAINER, IMAGE, max_size=4),
                                               st.none(), st.just({}))},
                          optional={"current": st.one_of(st.booleans(), st.none(), ODD_TEXT),
                                    "created": st.none() | st.text(max_size=30),
                                    "change_cause": st.none() | ODD_TEXT}),
    st.dictionaries(st.sampled_from(["revision", "images", "current"]), NUMBER, max_size=3),
    st.none(), st.integers(), ODD_TEXT,
)
@st.composite
def told_histories(draw: st.DrawFn) -> Any:
    """A history a cluster could tell: a few revisions of the same containers (mostly
    plausible, some fields odd), maybe one marked current, odd rows among them, any order."""
    containers = draw(st.lists(st.one_of(st.sampled_from(["app", "proxy"]), CONTAINER),
                               min_size=1, max_size=3, unique=True))
    image = st.one_of(st.sampled_from(["payments-api:v2.3", "payments-api:v2.4"]), IMAGE)
    numbers: list[Any] = sorted(draw(st.lists(st.integers(1, 12), min_size=2, max_size=5,
                                              unique=True)))
    if draw(st.booleans()):  # one revision told oddly
        numbers[draw(st.integers(0, len(numbers) - 1))] = draw(NUMBER)
    rows = [{"revision": draw(st.sampled_from([n, str(n)])) if isinstance(n, int) else n,
             "images": {c: draw(image) for c in containers}, "current": False}
            for n in numbers]
    marked = draw(st.sampled_from([len(rows) - 1, len(rows) - 1, -1, *range(len(rows))]))
    if marked >= 0:
        rows[marked]["current"] = True
    rows = draw(st.permutations(rows + draw(st.lists(ROW, max_size=2))))
    return draw(st.sampled_from([{"revisions": rows}, rows, {"revisions": rows + rows}]))


HISTORY = st.one_of(
    told_histories(), told_histories(), told_histories(),
    st.one_of(st.lists(ROW, max_size=8).map(lambda rows: {"revisions": rows}),
              st.lists(ROW, max_size=8), st.none(), st.just({}), ODD_TEXT),
)


@settings(max_examples=600)
@given(HISTORY, st.sampled_from(["payments-api", "checkout"]))
@example({"revisions": [revision(6, app="bad image"), revision(7, True, app="a:7")]},
         "payments-api")
@example({"revisions": [revision(6, app="a:6"), revision(7, True, app="bad image")]},
         "payments-api")
@example({"revisions": [revision(6, App="a:6"), revision(7, True, App="a:7")]}, "payments-api")
@example({"revisions": [revision(-6, app="a:1"), revision(-5, True, app="a:1")]},
         "payments-api")
@example({"revisions": [revision(2**40, app="a:1"), revision(2**40 + 1, True, app="a:1")]},
         "payments-api")
@example({"revisions": [revision(6, app="a:" + "6" * 120, b="b:" + "6" * 120),
                        revision(7, True, app="a:7", b="b:7")]}, "payments-api")
@example({"revisions": [revision(6, **{f"c{n}": "a:6" for n in range(60)}),
                        revision(7, True, **{f"c{n}": "a:7" for n in range(60)})]},
         "payments-api")
def test_whatever_history_a_cluster_reports_the_plan_is_valid_or_refused(
        answered: Any, name: str) -> None:
    answer, refused = made_or_refused(looks([name], FakeKubernetes(answered)))
    if refused is not None:
        assert "cannot be made" in refused
        return
    plan = made(answer)
    assert answer["to_revision"] < answer["from_revision"]
    assert {(p["namespace"], p["deployment"]) for p in rollout_params(plan)} == \
        ({("payments", "payments-api")} if name == "payments-api" else {("shop", "checkout-web")})
