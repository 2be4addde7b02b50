"""Targets decide owners, and everyone who asked is a requester (issue 40), through signed Slack
clicks and over REST, on SQLite and on PostgreSQL + Redis, with the example catalog and the
owners' policies: a search engineer cannot approve a plan that changes payments — a deployment
the catalog does not list in payments-api's namespace, or an allow-listed URL of payments-api's
— whatever the case claims; a URL whose allow-list entry names no component is approved by
nobody; and the person who opened a case cannot approve the plan a service token proposed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import Engine, select

from bot.ids import Action
from core.consumers.planner import Planner, Proposal
from core.consumers.runs import CommandRun
from core.db.tables import plan_approved
from tests.bot.test_bot_gate import open_and_wait_for_plan, wait_ephemeral
from tests.bot.test_bot_policy import EXAMPLES, policies
from tests.support.api import bearer, new_key
from tests.support.slack import Stack, approval_of, running_bot

REPORTER = "U0ERIN"  # opens the case, in no catalog group
ALICE, CAROL = "U0ALICE", "U0CAROL"  # payments-oncall, search-team (docs/examples/catalog)
PAYMENTS_ADMIN = "https://payments.example.com/payments-api/"
REFUND_ALL = f"{PAYMENTS_ADMIN}admin/refund-all"
VERIFY = {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60}


def restart(namespace: str, deployment: str) -> dict[str, Any]:
    return {"action": "k8s.rollout", "timeout_s": 300, "retry": 0,
            "params": {"operation": "restart", "namespace": namespace,
                       "deployment": deployment}}


LEDGER = {  # a deployment the catalog does not list, in payments-api's namespace
    "title": "Restart the search indexer", "risk_score": 0.2,
    "steps": [restart("payments", "payments-ledger-writer")],
    "rollback": {"action": "noop"}, "verify": VERIFY,
}
REFUND = {  # search-api, and a POST to payments-api's admin URL
    "title": "Restart search-api and clear its queue", "risk_score": 0.2,
    "steps": [restart("search", "search-api"),
              {"action": "http.request", "timeout_s": 30, "retry": 0,
               "params": {"method": "POST", "url": REFUND_ALL, "json": {}}}],
    "rollback": {"action": "noop"}, "verify": VERIFY,
}


def planner_of(plan: dict[str, Any], components: tuple[str, ...] = ()) -> type[Planner]:
    """A planner proposing ``plan`` on every case, naming ``components`` on it first (the claim
    a case makes, which must decide nothing)."""

    class Proposing(Planner):
        def _proposal(self, run: CommandRun) -> Proposal:
            if components and not run.case.get("components"):
                self.cases.name_components(run.case_id, components, "agent",
                                           f"name:{run.case_id}").data()
            return Proposal("test", dict(plan), "the test's plan", {})

    return Proposing


class Idle(Planner):
    """A planner that never proposes: the service token does."""

    def _proposal(self, run: CommandRun) -> str:
        return "the test's token proposes the plan"


@contextmanager
def serving(world: dict[str, Any], tmp_path: Path, planner: type[Planner],
            **settings: Any) -> Iterator[Stack]:
    options = {"catalog": EXAMPLES / "catalog", "policy": policies(tmp_path, freeze=False),
               "approvers": [], "directory": ["catalog"], **settings}
    engine = world.pop("engine")
    with running_bot(engine, consumers={"planner": planner}, **world, **options) as bot:
        yield bot


def decisions(engine: Engine, case_id: UUID) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(plan_approved.c.decision)
                                 .where(plan_approved.c.case_id == case_id)).scalars())


def eventually(done: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = done()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def slack_refusal(bot: Stack, ts: str, person: str) -> tuple[UUID, str, str]:
    """The case a mention opens, its plan message's words, and ``person``'s click's refusal."""
    case_id, plan, approval_id = open_and_wait_for_plan(bot, ts, user=REPORTER)
    bot.click(Action.APPROVE, approval_id, user=person, message_ts=plan["ts"])
    return case_id, json.dumps(plan["blocks"], ensure_ascii=False), wait_ephemeral(bot, person)[0]


def rest_refusal(bot: Stack, person: str, **case: Any) -> tuple[UUID, str]:
    """A case opened over REST (as an operator token), and ``person``'s REST approval's
    refusal (422 approval_refused) of the plan the planner proposes on it."""
    opened = bot.http.post(f"{bot.base}/case/create", json={"title": "5xx", **case},
                           headers={**bearer(bot.app.engine, f"ops-{new_key()}", None, "operator"),
                                    "Idempotency-Key": new_key()})
    assert opened.status_code == 201, opened.text
    case_id = UUID(opened.json()["data"]["case_id"])
    plan = eventually(lambda: bot.app.cases.proposed_plan(case_id), "the proposed plan")
    approved = bot.http.post(f"{bot.base}/case/{case_id}/approve",
                             json={"plan_hash": str(plan["plan_hash"])},
                             headers={**bearer(bot.app.engine, f"p-{new_key()}", person),
                                      "Idempotency-Key": new_key()})
    assert approved.status_code == 422, approved.text
    error = approved.json()["error"]
    assert error["code"] == "approval_refused"
    return case_id, str(error["message"])


# -- (a) a deployment the catalog does not list, in payments-api's namespace -------------------

LEDGER_STEP = "deployment payments-ledger-writer in namespace payments"


def test_a_search_engineer_cannot_approve_a_payments_deployment_by_slack(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, planner_of(LEDGER, ("search-api",))) as bot:
        case_id, shown, refused = slack_refusal(bot, "40.000100", CAROL)
        assert bot.app.cases.get_case(case_id)["components"] == ["search-api"]  # the claim
        assert "*Touches* payments-api (@payments-oncall, production)" in shown
        assert (f"step 1 (k8s.rollout) changes {LEDGER_STEP}: only payments-oncall may "
                "approve changes to payments-api") in refused
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    assert decisions(engine, case_id) == []


def test_a_search_engineer_cannot_approve_a_payments_deployment_over_rest(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, planner_of(LEDGER)) as bot:
        case_id, refused = rest_refusal(bot, CAROL, components=["search-api"])
        assert refused == (f"{CAROL} may not approve this plan: step 1 (k8s.rollout) changes "
                           f"{LEDGER_STEP}: only payments-oncall may approve changes to "
                           "payments-api")
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    assert decisions(engine, case_id) == []


def test_the_payments_owner_may_approve_the_same_plan(world, tmp_path):
    with serving(world, tmp_path, planner_of(LEDGER, ("search-api",))) as bot:
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "40.000150", user=REPORTER)
        bot.click(Action.APPROVE, approval_id, user=ALICE, message_ts=plan["ts"])
        bot.slack.wait_for(lambda: bot.app.cases.get_case(case_id)["status"] != "WAIT_GATE",
                           what="the owner's yes")


# -- (b) search-api and a POST to payments-api's admin URL, on a case naming nothing ----------

def test_a_post_to_an_unowned_url_is_approved_by_nobody_by_slack(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, planner_of(REFUND),
                 http_allowlist=[PAYMENTS_ADMIN]) as bot:  # an entry naming no component
        case_id, shown, refused = slack_refusal(bot, "40.000200", CAROL)
        unowned = (f"step 2 (http.request) changes the service behind POST {REFUND_ALL}, "
                   "which no catalog component owns")
        assert f"⛔ *Unowned*: {unowned}: nobody may approve this plan" in shown
        assert f"{unowned}: nobody may approve it" in refused
    assert decisions(engine, case_id) == []


def test_a_post_to_payments_admin_needs_its_owners_over_rest(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, planner_of(REFUND),
                 http_allowlist=[f"payments-api={PAYMENTS_ADMIN}"]) as bot:
        case_id, refused = rest_refusal(bot, CAROL)
        assert (f"step 2 (http.request) changes the service behind POST {REFUND_ALL}: only "
                "payments-oncall may approve changes to payments-api") in refused
        # Alice owns payments, not search-api's step: nobody alone owns both.
        _, alices = rest_refusal(bot, ALICE)
        assert "step 1 (k8s.rollout)" in alices and "only search-team" in alices
    assert decisions(engine, case_id) == []


def test_a_post_to_payments_admin_needs_its_owners_by_slack(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, planner_of(REFUND),
                 http_allowlist=[f"payments-api={PAYMENTS_ADMIN}"]) as bot:
        case_id, shown, refused = slack_refusal(bot, "40.000300", CAROL)
        assert "payments-api (@payments-oncall, production)" in shown
        assert (f"step 2 (http.request) changes the service behind POST {REFUND_ALL}: only "
                "payments-oncall may approve changes to payments-api") in refused
    assert decisions(engine, case_id) == []


def test_an_unowned_url_over_rest(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, planner_of(REFUND), http_allowlist=[PAYMENTS_ADMIN]) as bot:
        case_id, refused = rest_refusal(bot, CAROL)
        assert "which no catalog component owns: nobody may approve it" in refused
    assert decisions(engine, case_id) == []


# -- (c) the case's opener and a plan a service token proposed --------------------------------

def token_proposes(bot: Stack, case_id: UUID) -> str:
    """A service token proposes the noop template on the case; the plan's hash."""
    eventually(lambda: bot.app.cases.get_case(case_id)["status"] == "PLANNING", "planning")
    proposed = bot.http.post(f"{bot.base}/plan/generate",
                             json={"case_id": str(case_id), "template": "noop"},
                             headers={**bearer(bot.app.engine, "svc-ci", None, "operator"),
                                      "Idempotency-Key": new_key()})
    assert proposed.status_code == 200, proposed.text
    return str(proposed.json()["data"]["plan_hash"])


def test_the_opener_cannot_approve_a_plan_a_token_proposed_by_slack(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, Idle, catalog=None, policy=None,
                 approvers=[ALICE, CAROL]) as bot:
        bot.mention("<@U0BOT> checkout errors", event_id="Ev40.000400", ts="40.000400",
                    user=ALICE)
        case_id = eventually(lambda: bot.case_of_thread("40.000400"), "the case")
        token_proposes(bot, case_id)
        bot.slack.wait_for(lambda: bool(bot.plan_messages()), what="the plan message")
        plan = bot.plan_messages()[-1]
        bot.click(Action.APPROVE, approval_of(plan) or "", user=ALICE, message_ts=plan["ts"])
        assert "⛔ <@U0ALICE> requested this plan and cannot approve it" in wait_ephemeral(
            bot, ALICE)[0]
        assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    assert decisions(engine, case_id) == []


def test_the_opener_cannot_approve_a_plan_a_token_proposed_over_rest(world, tmp_path):
    engine: Engine = world["engine"]
    with serving(world, tmp_path, Idle, catalog=None, policy=None,
                 approvers=[ALICE, CAROL]) as bot:
        alice = bearer(bot.app.engine, "alice", ALICE)
        opened = bot.http.post(f"{bot.base}/case/create", json={"title": "checkout errors"},
                               headers={**alice, "Idempotency-Key": new_key()})
        assert opened.status_code == 201, opened.text
        case_id = UUID(opened.json()["data"]["case_id"])
        digest = token_proposes(bot, case_id)
        approved = bot.http.post(f"{bot.base}/case/{case_id}/approve",
                                 json={"plan_hash": digest},
                                 headers={**alice, "Idempotency-Key": new_key()})
        assert approved.status_code == 422, approved.text
        assert approved.json()["error"]["message"] == (
            f"{ALICE} requested this plan and cannot approve it")
        carol = bot.http.post(f"{bot.base}/case/{case_id}/approve", json={"plan_hash": digest},
                              headers={**bearer(bot.app.engine, "carol", CAROL),
                                       "Idempotency-Key": new_key()})
        assert carol.status_code == 200, carol.text  # anyone else on the list may
    assert [d["approver"] for d in decisions(engine, case_id)] == [CAROL]
