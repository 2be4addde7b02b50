"""One person, two channels: a signed Slack click and a REST approval by the principal linked to
the same Slack id count as one approver, so a two-person plan still waits for a second person."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
from sqlalchemy import Engine, select

from bot.ids import Action
from core import principals
from core.db.tables import plan_approved
from tests.support.slack import APPROVER, SECOND, Stack, approval_of, running_bot


def rest_approve(bot: Stack, case_id: UUID, digest: str, token: str, key: str
                 ) -> httpx.Response:
    return bot.http.post(f"{bot.base}/case/{case_id}/approve", json={"plan_hash": digest},
                         headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key})


def approvers(engine: Engine, case_id: UUID) -> list[str]:
    with engine.connect() as conn:
        query = select(plan_approved.c.decision).where(plan_approved.c.case_id == case_id)
        return [str(decision["approver"]) for decision in conn.execute(query).scalars()]


def test_a_slack_click_and_a_rest_approval_by_one_person_count_once(engine: Engine) -> None:
    with running_bot(engine, two_person_risk=0.0) as bot:
        _, same_person = principals.create(engine, "bob", "approver", APPROVER)
        _, second_person = principals.create(engine, "carol", "approver", SECOND)
        bot.mention("<@U0BOT> checkout errors", event_id="Ev31.000100", ts="31.000100")
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        plan = bot.plan_messages()[-1]
        case_id = bot.case_of_thread("31.000100")
        assert case_id is not None
        proposed = bot.app.cases.proposed_plan(case_id)
        assert proposed is not None
        digest = str(proposed["plan_hash"])

        bot.click(Action.APPROVE, approval_of(plan) or "", user=APPROVER, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: approvers(engine, case_id) == [APPROVER],
                           what="the click's approval")
        again = rest_approve(bot, case_id, digest, same_person, "rest-1")
        assert again.status_code == 200, again.text
        state: dict[str, Any] = again.json()["data"]["approval"]
        assert (state["state"], state["needs"], state["recorded"]) == ("pending", 1, False)
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
        assert approvers(engine, case_id) == [APPROVER]

        done = rest_approve(bot, case_id, digest, second_person, "rest-2")
        assert done.status_code == 200, done.text
        assert done.json()["data"]["status"] == "EXECUTING"
        assert sorted(approvers(engine, case_id)) == sorted([APPROVER, SECOND])
