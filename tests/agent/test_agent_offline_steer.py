"""The offline planner steered by a person (``agent.offline_steer``): what they ask is done where
the evidence allows it; where it forbids it the answer says why, citing the look; the rejected
remedy does not come back unless they ask for it or for a retry."""

from __future__ import annotations

from agent.offline_evidence import Looked, decide
from agent.offline_steer import declined_plan, steered, words_plan
from agent.prompts import Asked
from core.domain.plan_templates import load_template
from core.domain.plans import plan_hash
from tests.agent.test_agent_offline_evidence import OPENED, change, series

DEPLOYED = Looked(metrics=[series("http_5xx_ratio", 0.002, 0.08)], changes=[change()])
UNDO = "k8s.rollout undo prod/checkout"


def test_restart_instead_turns_a_rollback_into_a_restart() -> None:
    chosen = decide(DEPLOYED, OPENED, None)
    turned = steered(chosen, DEPLOYED, OPENED, Asked(words="restart the pods",
                                                     rejected_because="restart instead",
                                                     last_steps=UNDO), 3)
    assert chosen.action == "rollback" and turned.decision.action == "restart"
    assert "asked to restart" in turned.said


def test_the_rejected_remedy_does_not_come_back_without_words() -> None:
    chosen = decide(DEPLOYED, OPENED, None)
    turned = steered(chosen, DEPLOYED, OPENED, Asked(rejected_because="no", last_steps=UNDO), 3)
    assert turned.decision.action == "restart"
    assert 'Roll back was ruled out (the plan was rejected: "no")' in turned.said
    again = steered(chosen, DEPLOYED, OPENED, Asked(rejected_because="no", last_steps=UNDO,
                                                    retry=True), 3)
    assert again.decision.action == "rollback"


def test_what_the_evidence_forbids_is_not_done_and_the_answer_cites_the_look() -> None:
    stuck = Looked(metrics=[series("latency_p95_ms", 180, 900),
                            series("standby_saturation", 0.92, 0.92)])
    chosen = decide(stuck, OPENED, None)
    failover = steered(chosen, stuck, OPENED, Asked(words="fail over to the standby"), 4)
    rollback = steered(chosen, stuck, OPENED, Asked(words="just roll it back"), 4)
    fewer = steered(chosen, stuck, OPENED, Asked(words="scale to 2"), 4)
    assert failover.decision.action == rollback.decision.action == chosen.action == "restart"
    assert "standby_saturation is 92.0% (query_metrics): it has no headroom" in failover.said
    assert "recent_changes shows no change" in rollback.said
    assert fewer.decision.action == "restart" and "4 replicas run now (kube_objects)" in fewer.said
    more = steered(chosen, stuck, OPENED, Asked(words="scale to 10"), 4)
    assert (more.decision.action, more.decision.replicas) == ("scale", 10)
    nowhere = steered(chosen, stuck, OPENED, Asked(words="scale to 10"), None)
    assert nowhere.decision.action == "restart" and "nothing to scale" in nowhere.said


def test_without_a_look_the_words_pick_the_template_and_a_declined_plan_never_returns() -> None:
    canary = load_template("k8s.rollout.canary")
    restart, said = words_plan("k8s.rollout.canary", Asked(words="restart the pods"))
    assert restart == load_template("script.restart") and "asked to restart" in said
    asked = Asked(rejected_because="wrong", declined=(plan_hash(canary)[:12],),
                  last_steps="k8s.rollout set-image prod/app-canary")
    other, _ = words_plan("k8s.rollout.canary", asked)
    assert declined_plan(canary, asked) and not declined_plan(other, asked)
    assert [step["action"] for step in other["steps"]] == ["noop"]
