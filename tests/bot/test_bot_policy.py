"""Whose system is it (issue 27), through signed Slack clicks: a Backstage catalog and Cedar
policies decide who may approve a plan — the owners of what it touches, two of them for a risky
production change, an incident commander during a freeze — and every approval row names the
policies that admitted it and the policy set's version. On SQLite, and on PostgreSQL with the
gateway's Redis."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from bot.ids import Action
from core.consumers.planner import Planner, Proposal
from core.consumers.runs import CommandRun
from core.db.tables import plan_approved
from tests.bot.test_bot_gate import ephemerals_to, open_and_wait_for_plan, wait_ephemeral
from tests.support.slack import card_of, running_bot, texts

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
REPORTER = "U0ERIN"  # opens the case: the plan's requester, in no catalog group
ALICE, BOB, CAROL, DANA = "U0ALICE", "U0BOB", "U0CAROL", "U0DANA"  # docs/examples/catalog

ROLLOUT = {
    "title": "Roll payments-api back to v2.3.9",
    "risk_score": 0.8,
    "steps": [{"action": "k8s.rollout",
               "params": {"operation": "set-image", "namespace": "payments",
                          "deployment": "payments-api", "container": "api",
                          "image": "registry.example.com/payments:v2.3.9"},
               "timeout_s": 300, "retry": 0}],
    "rollback": {"action": "k8s.rollout",
                 "params": {"operation": "undo", "namespace": "payments",
                            "deployment": "payments-api"}},
    "verify": {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60},
}


class RollbackPlanner(Planner):
    """The template planner, proposing the payments rollback whatever the case's title."""

    def _proposal(self, run: CommandRun) -> Proposal:
        return Proposal("payments-rollback", dict(ROLLOUT), "the test's plan", {})


def policies(tmp_path: Path, *, freeze: bool) -> Path:
    """The example owners' policies, and a freeze window around now when ``freeze``."""
    folder = tmp_path / "policies"
    folder.mkdir()
    shutil.copy(EXAMPLES / "policies" / "owners.cedar", folder)
    if freeze:
        now = datetime.now(UTC)
        start, end = (f"{(now + delta):%Y-%m-%dT%H:%M:%SZ}"
                      for delta in (timedelta(hours=-1), timedelta(hours=1)))
        text = (EXAMPLES / "policies" / "freeze.cedar").read_text()
        (folder / "freeze.cedar").write_text(
            text.replace("2026-12-20T00:00:00Z", start).replace("2027-01-04T00:00:00Z", end))
    return folder


def serving(world: dict[str, Any], tmp_path: Path, *, freeze: bool = False) -> Any:
    engine = world.pop("engine")
    return running_bot(engine, consumers={"planner": RollbackPlanner}, approvers=[],
                       catalog=EXAMPLES / "catalog", policy=policies(tmp_path, freeze=freeze),
                       directory=["catalog"], **world)


def decisions(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(
            select(plan_approved).order_by(plan_approved.c.created_at)).mappings()]


def test_the_owners_approve_two_of_them_for_a_risky_production_change(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "27.000100", user=REPORTER)
        shown = json.dumps(plan["blocks"], ensure_ascii=False)
        assert "*Touches* payments-api (@payments-oncall, production)" in shown
        assert ("*Who may approve* two of @payments-oncall, because the owners of the "
                "components a plan touches approve it; a production change from risk 0.7 needs "
                "two of its owners — policy owners-approve, two-owners-from-risk-in-production"
                ) in shown  # the rule as a sentence, with its policies
        assert "*Risk* 0." in shown and ", reversible (a rollback is planned) — needs" in shown

        card = card_of(bot.slack)
        bot.slack.wait_for(lambda: any(
            "*Touches* payments-api (owner payments-oncall, production)" in texts(update)
            for update in bot.slack.updates_of(card["ts"])), what="the card saying whose it is")

        bot.click(Action.APPROVE, approval_id, user=CAROL, message_ts=plan["ts"])
        refused = wait_ephemeral(bot, CAROL)[0]
        assert "only payments-oncall may approve changes to payments-api" in refused

        bot.click(Action.APPROVE, approval_id, user=ALICE, message_ts=plan["ts"])
        assert "1 more approval(s) needed" in wait_ephemeral(bot, ALICE)[0]
        bot.slack.wait_for(lambda: any("1 of 2: <@U0ALICE>" in json.dumps(
            u["blocks"], ensure_ascii=False) for u in bot.slack.updates_of(plan["ts"])),
                           what="the plan message saying 1 of 2")
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"

        bot.click(Action.APPROVE, approval_id, user=BOB, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"] != "WAIT_GATE",
                           what="the second owner's yes to run the plan")
        version = bot.app.policy.version
    rows = decisions(engine)
    assert [(r["decision"]["approver"], r["decision"]["verdict"]) for r in rows] == [
        (ALICE, "approved"), (BOB, "approved")]
    for row in rows:
        assert row["policies"] == ["owners-approve", "two-owners-from-risk-in-production"]
        assert row["policy_version"] == version
    timeline = bot.app.cases.timeline(case_id)
    refusal = next(r for r in timeline if r["meta"].get("outcome") == "refused")
    assert (refusal["actor"], refusal["meta"]["policy_version"]) == (CAROL, version)
    approved = next(r for r in timeline if r["event"] == "gate_approved")
    assert approved["meta"]["policies"] == ["owners-approve",
                                            "two-owners-from-risk-in-production"]


def test_during_a_freeze_an_owner_is_refused_and_an_incident_commander_admitted(
        world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, freeze=True) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "27.000200", user=REPORTER)
        shown = json.dumps(plan["blocks"], ensure_ascii=False)
        assert "⛔ *deploy freeze until 2027-01-04 00:00 UTC* (policy deploy-freeze)" in shown
        assert ("*Who may approve* one of @incident-commanders, because during the deploy "
                "freeze an incident commander approves production changes — policy "
                "incident-commanders-during-freeze") in shown

        bot.click(Action.APPROVE, approval_id, user=ALICE, message_ts=plan["ts"])
        refused = wait_ephemeral(bot, ALICE)[0]
        assert "refused by policy deploy-freeze (deploy freeze until" in refused
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"

        bot.click(Action.APPROVE, approval_id, user=DANA, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"] != "WAIT_GATE",
                           what="the incident commander's yes")
        assert ephemerals_to(bot, DANA) == [] or "⛔" not in ephemerals_to(bot, DANA)[0]
        refusal = next(r for r in bot.app.cases.timeline(case_id)
                       if r["meta"].get("outcome") == "refused")
        assert refusal["meta"]["policies"] == ["deploy-freeze"]
    [row] = decisions(engine)
    assert (row["decision"]["approver"], row["policies"]) == (
        DANA, ["incident-commanders-during-freeze"])
