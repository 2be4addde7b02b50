"""A plan's dry run step by step (fakes for the adapters): what an adapter read, what it refused,
and what was not checked — an action without a dry run, a target that could not answer, a
reading that broke — never a claim that was not made."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.domain.plans import parse_plan
from core.errors import Unavailable
from core.steps.adapters.base import Checked, StepContext, StepOutcome, StepRefused
from core.steps.dry_run import PlanDryRun
from tests.support.cases import PLAN


class Reading:
    """A fake adapter whose dry run answers ``said`` or raises it."""

    def __init__(self, action: str, said: Checked | Exception) -> None:
        self.action = action
        self.said = said

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        raise AssertionError("a dry run never runs a step")

    def dry_run(self, params: Mapping[str, Any]) -> Checked:
        if isinstance(self.said, Exception):
            raise self.said
        return self.said


def plan(*actions: str) -> Any:
    steps = [{"action": action, "params": {}, "timeout_s": 30, "retry": 0} for action in actions]
    return parse_plan({**PLAN, "steps": steps, "rollback": {"steps": []}})


def lines(adapters: dict[str, Any], *actions: str) -> list[tuple[str, str]]:
    report = PlanDryRun(lambda: adapters)(plan(*actions))
    return [(line.verdict, line.text) for line in report.lines]


def test_each_step_is_read_refused_or_not_checked_with_why() -> None:
    adapters = {"script.exec": Reading("script.exec", StepRefused("script.exec: 'rm' is not on "
                                                                  "the script allow-list")),
                "http.request": Reading("http.request", ("ok", "would send GET https://x/"))}
    assert lines(adapters, "noop", "script.exec", "http.request", "gateway.flip") == [
        ("ok", "step 1 (noop): does nothing"),
        ("refused", "step 2 (script.exec): cannot run: 'rm' is not on the script allow-list"),
        ("ok", "step 3 (http.request): would send GET https://x/"),
        ("not_checked", "step 4 (gateway.flip): not checked: the traffic gateway answers no "
                        "dry run")]


def test_a_target_that_cannot_answer_or_a_broken_reading_claims_nothing() -> None:
    down = {"k8s.rollout": Reading("k8s.rollout", Unavailable("the API cannot be reached"))}
    assert lines(down, "k8s.rollout") == [
        ("not_checked", "step 1 (k8s.rollout): not checked: the API cannot be reached")]
    broken = {"k8s.rollout": Reading("k8s.rollout", AttributeError("spec"))}
    assert lines(broken, "k8s.rollout") == [
        ("not_checked", "step 1 (k8s.rollout): not checked: its dry run failed "
                        "(AttributeError)")]


def test_the_report_names_its_plan_and_refuses_in_one_sentence() -> None:
    refusing = {"script.exec": Reading("script.exec", StepRefused("script.exec: no"))}
    report = PlanDryRun(lambda: refusing)(plan("script.exec", "script.exec"))
    assert report.digest == plan("script.exec", "script.exec").digest
    assert report.reason() == ("the plan cannot run as written: step 1 (script.exec): cannot "
                               "run: no (and 1 more step(s) that cannot run)")


class SameAsNow:
    """A rollout's cluster where checkout runs v1.8.0 at revision 12 (11 ran v1.7.3)."""

    host = "https://cluster.example"

    def rollout_state(self, namespace: str, name: str) -> Any:
        from core.investigate.kubernetes import RolloutState

        return RolloutState({"app": "shop/checkout:v1.8.0"}, 12,
                            {11: {"app": "shop/checkout:v1.7.3"},
                             12: {"app": "shop/checkout:v1.8.0"}})


def test_an_empty_diff_is_refused_as_a_step_and_fine_as_a_rollback_step() -> None:
    from core.steps.adapters.k8s import K8sRolloutAdapter

    same = {"operation": "set-image", "namespace": "shop", "deployment": "checkout",
            "container": "app", "image": "shop/checkout:v1.8.0"}
    back = {**same, "image": "shop/checkout:v1.7.3"}
    plan = parse_plan({**PLAN, "steps": [
        {"action": "k8s.rollout", "params": same, "timeout_s": 60, "retry": 0},
        {"action": "k8s.rollout", "params": {"operation": "undo", "namespace": "shop",
                                             "deployment": "checkout", "to_revision": 12},
         "timeout_s": 60, "retry": 0},
        {"action": "k8s.rollout", "params": back, "timeout_s": 60, "retry": 0}],
        "rollback": {"action": "k8s.rollout", "params": same}})
    adapter = K8sRolloutAdapter("kubectl", 1000, reads=SameAsNow())
    lines = PlanDryRun(lambda: {"k8s.rollout": adapter})(plan).lines
    assert [(line.verdict, line.says) for line in lines] == [
        ("refused", "container app of deployment shop/checkout already runs "
                    "shop/checkout:v1.8.0: the step would change nothing"),
        ("refused", "revision 12 of deployment shop/checkout runs the images it runs now "
                    "(app=shop/checkout:v1.8.0): undoing to it would change nothing"),
        ("ok", "would set container app of deployment shop/checkout: shop/checkout:v1.8.0 → "
               "shop/checkout:v1.7.3"),
        ("ok", "would set back what the steps change (container app of deployment "
               "shop/checkout holds that now)")]
