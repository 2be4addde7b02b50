"""The offline planner's reasoning (``agent.offline_evidence``) and the order of its looks
(``agent.offline_looks``): each rule reads the looks' answers, not the incident's words, and
every answer a tool could give — hostile or malformed — ends in a decision, never an error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.offline_evidence import Looked, decide, kind_of
from agent.offline_looks import Answers, next_looks, written_plan
from core.domain.plans import plan_problems

OPENED = datetime(2026, 11, 27, 14, 10, tzinfo=UTC)
ONSET = OPENED - timedelta(minutes=10)


def series(metric: str, first: float, last: float, peak: float | None = None,
           at: datetime | None = ONSET) -> dict[str, Any]:
    return {"query": f'{metric}{{service="checkout"}}', "series": [{
        "labels": {"__name__": metric, "service": "checkout"}, "first": first, "last": last,
        "min": min(first, last), "max": max(first, last) if peak is None else peak,
        "change": None if at is None else {"at": at.isoformat(), "before": first,
                                           "after": last}}]}


def change(kind: str = "deploy", before: timedelta = timedelta(minutes=3)) -> dict[str, Any]:
    return {"kind": kind, "service": "checkout", "version": "v2.4.0", "actor": "ci",
            "happened_at": (ONSET - before).isoformat()}


def pods(reason: str) -> dict[str, Any]:
    return {"kind": "pods", "pods": [{"name": "checkout-1", "restarts": 3,
                                      "last_termination": {"app": f"{reason} (exit 137)"}}]}


def test_metric_kinds_are_read_from_their_names():
    assert [kind_of(m) for m in ("http_5xx_ratio", "latency_p95_ms", "memory_working_set_bytes",
                                 "cpu_usage_ratio", "http_requests_per_second",
                                 "standby_saturation", "queue_depth")] == [
        "errors", "latency", "memory", "cpu", "load", "standby", "other"]


def test_a_deploy_just_before_the_errors_is_rolled_back_and_cited():
    chosen = decide(Looked(metrics=[series("http_5xx_ratio", 0.002, 0.08)],
                           changes=[change()]), OPENED, None)
    assert chosen.action == "rollback" and chosen.change is not None
    assert "deploy of checkout v2.4.0 by ci" in chosen.findings()
    assert "3 min before it began" in chosen.findings()
    # back to normal (0.002, with the margin that calls it anomalous), never halfway (0.041),
    # on the series query_metrics read
    assert chosen.checks == ({"metric": 'http_5xx_ratio{service="checkout"}', "below": 0.003,
                              "for_s": 300},)


def test_a_change_long_before_or_after_the_change_point_is_not_its_cause():
    for gap in (timedelta(hours=2), -timedelta(minutes=30)):
        chosen = decide(Looked(metrics=[series("http_5xx_ratio", 0.002, 0.08)],
                               changes=[change(before=gap)]), OPENED, None)
        assert chosen.action == "restart", gap


def test_a_climbing_working_set_or_an_oom_kill_without_a_change_is_a_restart():
    climbing = decide(Looked(metrics=[series("memory_working_set_bytes", 1e9, 1.9e9)]),
                      OPENED, None)
    killed = decide(Looked(metrics=[series("latency_p95_ms", 180, 900)],
                           pods=[pods("OOMKilled")]), OPENED, None)
    assert climbing.action == killed.action == "restart"
    assert "OOMKilled (kube_objects)" in killed.findings()


def test_errors_with_a_standby_that_has_headroom_fail_over():
    looked = [series("http_5xx_ratio", 0.002, 0.35), series("standby_saturation", 0.3, 0.3)]
    assert decide(Looked(metrics=looked), OPENED, None).action == "failover"
    full = [series("http_5xx_ratio", 0.002, 0.35), series("standby_saturation", 0.9, 0.9)]
    assert decide(Looked(metrics=full), OPENED, None).action == "restart"


def test_saturated_cpu_under_growing_load_scales_out_but_not_under_flat_load():
    grown = [series("cpu_usage_ratio", 0.4, 0.95), series("http_requests_per_second", 800, 1700)]
    flat = [series("cpu_usage_ratio", 0.4, 0.95), series("http_requests_per_second", 800, 810)]
    assert decide(Looked(metrics=grown), OPENED, None).action == "scale"
    assert decide(Looked(metrics=flat), OPENED, None).action == "restart"


def test_an_anomaly_that_ended_or_none_at_all_changes_nothing():
    ended = decide(Looked(metrics=[series("http_5xx_ratio", 0.002, 0.0021, peak=0.09)]),
                   OPENED, None)
    steady = decide(Looked(metrics=[series("latency_p95_ms", 180, 182)]), OPENED, None)
    assert ended.action == steady.action == "no change"
    assert "the anomaly ended before the report" in ended.findings()
    assert ended.checks[0]["below"] > 0.0021  # holds in the world as it is


def test_a_past_case_that_checked_the_anomalous_metric_is_followed_unless_a_change_explains_it():
    past = {"verify": {"checks": [{"metric": "memory_working_set_bytes", "below": 1.2e9}]}}
    leak = [series("memory_working_set_bytes", 1e9, 1.9e9)]
    assert decide(Looked(metrics=leak), OPENED, past).action == "learned"
    assert decide(Looked(metrics=leak, changes=[change()]), OPENED, past).action == "rollback"


def test_without_metrics_only_a_change_before_the_case_opened_counts():
    refused = "no Prometheus is configured (OPSGATE_PROMETHEUS_URL); no metric can be read"
    chosen = decide(Looked(changes=[change(before=timedelta(minutes=-5))],
                           metrics_refused=refused), OPENED, None)
    assert chosen.action == "rollback" and "nothing was verified by metrics" in chosen.findings()
    assert decide(Looked(metrics_refused=refused), OPENED, None).action == "no change"


def test_the_looks_come_in_an_sres_order():
    case = {"case_id": "c", "title": "checkout errors", "created_at": OPENED.isoformat(),
            "components": ["checkout"]}
    answers: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    order = []
    while (looks := next_looks("c", case, Answers(answers), "checkout errors")) is not None:
        order.append(sorted({name for name, _ in looks}))
        for name, args in looks:
            answer = ({"selector": '{service="checkout"}', "metrics": ["http_5xx_ratio"]}
                      if name == "list_metrics" else {"ok": True})
            answers.setdefault(name, []).append((args, answer))
    assert order == [["list_metrics"], ["query_metrics"],
                     ["find_components", "kube_events", "kube_objects", "list_alerts",
                      "recent_changes"]]
    assert answers["find_components"][0][0] == {"query": "checkout"}  # its remedy annotations
    query = answers["query_metrics"][0][0]
    assert query["query"] == 'http_5xx_ratio{service="checkout"}' and query["step_s"] == 60


def test_written_plans_pass_the_plan_schema():
    answers = Answers({"kube_objects": [({}, {"kind": "deployments", "namespace": "shop",
                                              "deployments": [{"name": "checkout",
                                                               "replicas": {"desired": 3}}]})]})
    for looked in ([series("cpu_usage_ratio", 0.4, 0.95)],
                   [series("http_5xx_ratio", 0.002, 0.35), series("standby_saturation", .3, .3)],
                   [series("latency_p95_ms", 180, 181)]):
        chosen = decide(Looked(metrics=looked), OPENED, None)
        plan = written_plan(chosen, answers)
        assert plan is not None and not plan_problems(plan), chosen.action
    unrecorded = written_plan(decide(Looked(metrics=[series("http_5xx_ratio", .002, .08)],
                                            changes=[change("config")]), OPENED, None), answers)
    # a config change whose object and data are unknown is never an undo of something else
    assert unrecorded is not None and [s["action"] for s in unrecorded["steps"]] == ["noop"]
    assert "a person must" in unrecorded["steps"][0]["params"]["note"]


def deployments(**extra: Any) -> Answers:
    found = {"kind": "deployments", "namespace": "ledger", "deployments": [
        {"name": "ledger", "replicas": {"desired": 3}, **extra}]}
    return Answers({"kube_objects": [({}, found)], "find_components": [({}, {"components": [
        {"name": "ledger", "remedy": {"opsgate.dev/max-replicas": "5",
                                      "opsgate.dev/regions": "fra1,ams3",
                                      "opsgate.dev/flags": "ledger-flags"}}]})]})


def recorded(target: str, before: Any, after: Any) -> dict[str, Any]:
    return {**change("config"), "service": "ledger", "target": target, "before": before,
            "after": after}


def test_a_configmap_change_is_set_back_and_what_mounts_it_restarted():
    chosen = decide(Looked(metrics=[series("http_5xx_ratio", .002, .3)], changes=[recorded(
        "configmap/ledger-config", {"payout.timeout": "3000ms"}, {"payout.timeout": "3s"})]),
        OPENED, None)
    plan = written_plan(chosen, deployments(configmaps=["ledger-config"]))
    assert plan is not None and not plan_problems(plan)
    assert [(s["action"], s["params"].get("operation")) for s in plan["steps"]] == [
        ("k8s.configmap", None), ("k8s.rollout", "restart")]
    assert plan["steps"][0]["params"] == {"namespace": "ledger", "name": "ledger-config",
                                          "data": {"payout.timeout": "3000ms"}}
    assert plan["rollback"]["steps"][0]["params"]["data"] == {"payout.timeout": "3s"}
    elsewhere = written_plan(chosen, deployments(configmaps=["other"]))
    assert elsewhere is not None and elsewhere["steps"][0]["action"] == "noop"


def test_a_flag_change_is_set_back_on_the_components_feature_flag():
    chosen = decide(Looked(metrics=[series("http_5xx_ratio", .002, .3)], changes=[recorded(
        "flag/new-payout", {"defaultVariant": "off"}, {"defaultVariant": "on"})]),
        OPENED, None)
    plan = written_plan(chosen, deployments())
    assert plan is not None and not plan_problems(plan)
    assert [s["action"] for s in plan["steps"]] == ["flag.set"]
    assert plan["steps"][0]["params"] == {"namespace": "ledger", "name": "ledger-flags",
                                          "flag": "new-payout",
                                          "value": {"defaultVariant": "off"}}


def test_scale_is_bounded_by_the_annotation_and_checks_what_users_feel():
    chosen = decide(Looked(metrics=[series("cpu_usage_ratio", 0.4, 0.95),
                                    series("latency_p95_ms", 170, 1400),
                                    series("http_requests_per_second", 900, 2250)]),
                    OPENED, None)
    plan = written_plan(chosen, deployments())
    assert plan is not None and not plan_problems(plan)
    assert plan["steps"][0] == {"action": "k8s.scale", "timeout_s": 120, "retry": 1, "params": {
        "namespace": "ledger", "deployment": "ledger", "replicas": 5}}
    assert {c["metric"]: c["below"] for c in plan["verify"]["checks"]} == {
        'latency_p95_ms{service="checkout"}': 255, 'cpu_usage_ratio{service="checkout"}': 0.75}


def test_failover_flips_the_real_route_between_the_real_regions():
    chosen = decide(Looked(metrics=[series("http_5xx_ratio", 0.002, 0.35),
                                    series("standby_saturation", .3, .3)]), OPENED, None)
    plan = written_plan(chosen, deployments())
    assert plan is not None and plan["steps"][0]["params"] == {
        "route": "ledger", "from": "fra1", "to": "ams3"}


ANY = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.text(max_size=20)
                   | st.integers(), lambda inner: st.lists(inner, max_size=4)
                   | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)
SERIES = st.fixed_dictionaries({"labels": st.dictionaries(st.sampled_from(["__name__", "x"]),
                                                          st.text(max_size=30)),
                                "first": ANY, "last": ANY, "max": ANY, "change": ANY})


@settings(max_examples=200, deadline=None)
@given(metrics=st.lists(st.fixed_dictionaries({"query": ANY, "series": st.lists(
    SERIES | ANY, max_size=3)}), max_size=3),
       changes=st.lists(st.dictionaries(st.sampled_from(["kind", "happened_at", "service",
                                                         "version"]), ANY), max_size=3),
       pods=st.lists(st.dictionaries(st.just("pods"), st.lists(
           st.dictionaries(st.sampled_from(["name", "last_termination"]), ANY), max_size=2)),
           max_size=2))
def test_any_answer_a_tool_could_give_ends_in_a_decision(metrics, changes, pods):
    try:
        chosen = decide(Looked(metrics=metrics, changes=changes, pods=pods), OPENED, None)
    except (TypeError, AttributeError) as broken:  # the answers' shapes are the tools' own
        raise AssertionError(f"a malformed answer broke the decision: {broken}") from broken
    assert chosen.action in ("rollback", "restart", "scale", "failover", "no change")
    assert chosen.findings().endswith(".")


def test_without_metrics_the_other_looks_come_once_and_the_looking_ends():
    case = {"case_id": "c", "title": "checkout slow", "created_at": OPENED.isoformat(),
            "components": ["checkout"]}
    answers: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    rounds = 0
    while (looks := next_looks("c", case, Answers(answers), "checkout slow")) is not None:
        rounds += 1
        assert rounds <= 3, f"the looks went round again: {looks}"
        for name, args in looks:
            answers.setdefault(name, []).append(
                (args, {"error": "no Prometheus is configured"} if name == "list_metrics"
                 else {"ok": True}))
    assert rounds == 2 and "query_metrics" not in answers and "recent_changes" in answers


def test_a_rollback_is_not_made_when_the_revision_left_is_not_the_suspected_deploy():
    from agent.offline_looks import made_plan

    chosen = decide(Looked(metrics=[series("http_5xx_ratio", 0.002, 0.08)],
                           changes=[change()]), OPENED, None)
    template = ({}, {"plan": {"title": "Roll checkout back to revision 11"}})

    def answers(image: str) -> Answers:
        return Answers({"plan_template": [template], "kube_objects": [({}, {
            "kind": "deployments", "namespace": "shop", "deployments": [
                {"name": "checkout", "images": {"app": f"registry/checkout:{image}"}}]})]})

    assert made_plan(answers("v2.4.0"), chosen) == (
        {"title": "Roll checkout back to revision 11"}, None)
    plan, why = made_plan(answers("v2.4.1"), chosen)
    assert plan is None and why == (
        "deployment shop/checkout runs registry/checkout:v2.4.1, not v2.4.0 that the suspected "
        "deploy brought: rolling its current revision back would undo another change")
