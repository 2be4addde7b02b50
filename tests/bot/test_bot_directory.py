"""Who is in which group comes from the directory, and a revocation never waits (issue 40),
through signed Slack clicks and REST approvals, on SQLite and on PostgreSQL + Redis: a catalog
Group named opsgate-approvers, a User's own memberOf, a Group's own parent and a Group named
like a Slack user group grant Eve nothing; deleting the file that made her an owner revokes
her at once while another catalog file is broken; an added .cedar file decides the next click
without a restart."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

from bot.ids import Action
from core import principals
from core.consumers.planner import Planner, Proposal
from core.consumers.runs import CommandRun
from tests.bot.test_bot_gate import open_and_wait_for_plan, wait_ephemeral
from tests.bot.test_bot_policy import ROLLOUT
from tests.bot.test_bot_rest_approvals import rest_approve
from tests.support.slack import Stack, running_bot

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
REPORTER, ALICE, DANA, EVE = "U0ERIN", "U0ALICE", "U0DANA", "U0EVE"
PLAN = {**ROLLOUT, "risk_score": 0.3}  # one owner is enough
EVE_USER = """\
apiVersion: backstage.io/v1alpha1
kind: User
metadata: {name: eve, annotations: {slack.com/user-id: U0EVE}}
spec: {memberOf: %s}
"""
GROUP = """\
---
apiVersion: backstage.io/v1alpha1
kind: Group
metadata: {name: %s}
spec: {type: team, members: [eve]%s}
"""
ATTACKS = {  # file name → what it claims
    "eve-member-of.yaml": EVE_USER % "[payments-oncall]",
    "eve-parent.yaml": GROUP % ("eve-team", ", parent: payments-oncall"),
    "eve-slack-group.yaml": GROUP % ("S0614TZR7", ", parent: payments-oncall"),
    "eve-approvers.yaml": GROUP % ("opsgate-approvers", ""),
}


class SmallRollback(Planner):
    def _proposal(self, run: CommandRun) -> Proposal:
        return Proposal("payments-rollback", dict(PLAN), "the test's plan", {})


def folder_of(tmp_path: Path, name: str, examples: str, *files: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file in files or [p.name for p in (EXAMPLES / examples).iterdir()]:
        shutil.copy(EXAMPLES / examples / file, folder)
    return folder


def serving(world: dict[str, Any], **settings: Any) -> Any:
    engine = world.pop("engine")
    return running_bot(engine, consumers={"planner": SmallRollback}, **settings, **world)


def until(condition: Callable[[], Any], what: str, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def refused_both_ways(bot: Stack, case_id: UUID, plan: dict[str, Any], approval_id: str,
                      person: str, token: str, key: str) -> tuple[str, dict[str, Any]]:
    """``person``'s click and their REST approval, both refused: the words of each."""
    before = len([e for e in bot.slack.calls("chat.postEphemeral") if e.get("user") == person])
    bot.click(Action.APPROVE, approval_id, user=person, message_ts=plan["ts"])
    clicked = wait_ephemeral(bot, person, before + 1)[-1]
    proposed = bot.app.cases.proposed_plan(case_id)
    assert proposed is not None
    rest = rest_approve(bot, case_id, str(proposed["plan_hash"]), token, key)
    assert rest.status_code == 422, rest.text
    assert bot.app.cases.get_case(case_id)["status"] == "WAIT_GATE"
    return clicked, rest.json()["error"]


def test_claims_outside_the_directory_grant_eve_nothing(world, tmp_path):
    catalog = folder_of(tmp_path, "catalog", "catalog")
    with serving(world, catalog=catalog, policy=EXAMPLES / "policies", approvers=[],
                 directory=["catalog:people.yaml", "catalog:payments.yaml",
                            "catalog:search.yaml"]) as bot:
        _, eve = principals.create(bot.app.engine, "eve", "approver", EVE)
        for name, text in ATTACKS.items():  # eve herself: in eve-member-of.yaml
            (catalog / name).write_text(text)
        until(lambda: bot.app.catalog.current() and len(bot.app.catalog.broken) == 2,
              "the reserved names left out")
        assert set(bot.app.catalog.broken) == {str(catalog / "eve-slack-group.yaml"),
                                               str(catalog / "eve-approvers.yaml")}
        ready = bot.http.get(f"{bot.base}/readyz").json()["data"]["checks"]["policy"]
        assert set(ready["degraded"]) == set(bot.app.catalog.broken)

        case_id, plan, approval_id = open_and_wait_for_plan(bot, "40.000100", user=REPORTER)
        clicked, rest = refused_both_ways(bot, case_id, plan, approval_id, EVE, eve, "eve-1")
        assert "only payments-oncall may approve changes to payments-api" in clicked
        assert "only payments-oncall may approve changes to payments-api" in rest["message"]

        bot.click(Action.APPROVE, approval_id, user=ALICE, message_ts=plan["ts"])
        until(lambda: bot.app.cases.get_case(case_id)["status"] != "WAIT_GATE",
              "the owner's yes")


def test_a_catalog_group_named_opsgate_approvers_makes_no_approver(world, tmp_path):
    catalog = folder_of(tmp_path, "catalog", "catalog")
    with serving(world, catalog=catalog, approvers=[ALICE], directory=["catalog"]) as bot:
        _, eve = principals.create(bot.app.engine, "eve", "approver", EVE)
        (catalog / "eve-approvers.yaml").write_text(EVE_USER % "[]" + ATTACKS[
            "eve-approvers.yaml"])
        until(lambda: bot.app.catalog.current() and bot.app.catalog.broken, "the file left out")
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "40.000200", user=REPORTER)
        clicked, rest = refused_both_ways(bot, case_id, plan, approval_id, EVE, eve, "eve-2")
        assert clicked == "⛔ U0EVE is not an approver (<@U0ALICE> may approve)"  # Slack names
        assert rest["message"] == "U0EVE is not an approver (U0ALICE may approve)"


def test_a_revocation_holds_while_another_catalog_file_is_broken(world, tmp_path):
    catalog = folder_of(tmp_path, "catalog", "catalog")
    (catalog / "eve.yaml").write_text(EVE_USER % "[payments-oncall]")
    with serving(world, catalog=catalog, policy=EXAMPLES / "policies", approvers=[],
                 directory=["catalog"]) as bot:
        _, eve = principals.create(bot.app.engine, "eve", "approver", EVE)
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "40.000300", user=REPORTER)
        assert EVE in bot.app.catalog.current().members("payments-oncall")

        (catalog / "eve.yaml").unlink()  # the revocation…
        search = catalog / "search.yaml"  # … while someone's typo breaks another file
        search.write_text(search.read_text().replace("lifecycle:", "lifecycle: [production]\n"
                                                                   "  lifecycl:"))
        until(lambda: bot.app.catalog.current() and bot.app.catalog.broken == (str(search),),
              "the reload")
        clicked, rest = refused_both_ways(bot, case_id, plan, approval_id, EVE, eve, "eve-3")
        assert "only payments-oncall may approve changes to payments-api" in clicked
        assert "only payments-oncall may approve" in rest["message"]
        ready = bot.http.get(f"{bot.base}/readyz").json()["data"]["checks"]["policy"]
        assert ready["degraded"] == [str(search)]
        assert ready["warning"].startswith(f"OPSGATE_CATALOG: left out until fixed, granting "
                                           f"nothing: {search}: ")


def test_an_added_cedar_file_decides_without_a_restart(world, tmp_path):
    policies = folder_of(tmp_path, "policies", "policies", "owners.cedar")
    with serving(world, catalog=EXAMPLES / "catalog", policy=policies, approvers=[],
                 directory=["catalog"]) as bot:
        _, dana = principals.create(bot.app.engine, "dana", "approver", DANA)
        case_id, plan, approval_id = open_and_wait_for_plan(bot, "40.000400", user=REPORTER)
        before = bot.http.get(f"{bot.base}/readyz").json()["data"]["checks"]["policy"]
        clicked, _rest = refused_both_ways(bot, case_id, plan, approval_id, DANA, dana,
                                           "dana-1")
        assert "only payments-oncall may approve changes to payments-api" in clicked

        (policies / "commanders.cedar").write_text(
            '@id("incident-commanders-approve")\n'
            'permit (principal in Group::"incident-commanders", action == Action::"approve", '
            "resource);\n")
        until(lambda: bot.app.policy.cedar.version != before["policy_version"], "the reload")
        after = bot.http.get(f"{bot.base}/readyz").json()["data"]["checks"]["policy"]
        assert after["policy_version"] == bot.app.policy.cedar.version
        proposed = bot.app.cases.proposed_plan(case_id)
        assert proposed is not None
        done = rest_approve(bot, case_id, str(proposed["plan_hash"]), dana, "dana-2")
        assert done.status_code == 200, done.text
        assert done.json()["data"]["status"] == "EXECUTING"
