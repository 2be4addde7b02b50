"""The plan message's buttons, the Reject modal and the findings' link buttons (acknowledged
only). Every decision is the core's (``approve_plan``/``reject_plan``: approvers, requester,
two-person rule, plan hash and case version); the bot only carries the approval id and shows the
core's answer."""

from __future__ import annotations

import json
import re

from slack_bolt import Ack
from slack_bolt import App as Bolt

from bot.blocks import reject_modal
from bot.cases import SlackCases
from bot.failures import correlation_id, failure_text, tell
from bot.ids import FINDING_LINK, REASON_BLOCK, REASON_INPUT, Action, View
from bot.listeners import Body, acknowledge, lazy
from bot.plan_words import details_modal
from core.errors import NotFound

REFUSED_EARLY = "(refused before a reason was asked)"


def register(bolt: Bolt, cases: SlackCases) -> None:
    bolt.action(Action.APPROVE)(ack=acknowledge,
                                lazy=[lazy(lambda body: approve(cases, body), cases)])
    bolt.action(Action.REJECT)(ack=acknowledge,
                               lazy=[lazy(lambda body: ask_reason(cases, body), cases)])
    bolt.action(Action.DETAILS)(ack=acknowledge,
                                lazy=[lazy(lambda body: show_details(cases, body), cases)])
    # A finding's Query button only opens its link; Slack still reports the click.
    bolt.action(re.compile(f"^{FINDING_LINK}"))(acknowledge)

    def submit(ack: Ack, body: Body) -> None:
        error = reject(cases, body)
        if error is None:
            ack()
        else:
            ack(response_action="errors", errors={REASON_BLOCK: error})

    bolt.view(View.REJECT_REASON)(submit)


def click_of(body: Body) -> str:
    """One click's identity: Slack's ``action_ts`` (the trigger id when it is missing)."""
    action = body["actions"][0]
    return str(action.get("action_ts") or body.get("trigger_id") or "")


def approve(cases: SlackCases, body: Body) -> None:
    user, approval_id = str(body["user"]["id"]), str(body["actions"][0]["value"])
    ref = cases.approval(approval_id)
    reply = cases.approve(ref, user, click_of(body), correlation_id(body))
    if reply.replayed and reply.ok:
        return  # the same click delivered again: its first answer stands
    data = reply.data()  # a refusal raises: the one error handler tells the user why
    approval = data.get("approval") or {}
    if approval.get("state") == "pending":
        said = "recorded" if approval.get("recorded") else "already recorded"
        tell(cases, body, f"👍 Your approval is {said}; {approval.get('needs')} more "
                                 "approval(s) needed.")


def ask_reason(cases: SlackCases, body: Body) -> None:
    """Open the reason modal for someone the core would let reject; anyone else gets the core's
    refusal (recorded as the audit line) without typing a reason."""
    user, approval_id = str(body["user"]["id"]), str(body["actions"][0]["value"])
    ref = cases.approval(approval_id)
    if not cases.may_reject(ref, user):
        cases.reject(ref, user, REFUSED_EARLY, click_of(body), correlation_id(body)).data()
        return
    channel = (body.get("channel") or {}).get("id")
    thread = (body.get("message") or {}).get("thread_ts")
    meta = json.dumps({"approval_id": approval_id, "channel": channel, "thread_ts": thread})
    found = cases.cases.proposed_plan(ref.case_id, ref.plan_hash)
    title = None if found is None else str(found["plan"].get("title") or "") or None
    cases.client.views_open(trigger_id=body["trigger_id"], view=reject_modal(title, meta))


def show_details(cases: SlackCases, body: Body) -> None:
    """The plan's exact JSON, in a modal for whoever clicked ``Details`` (the message itself
    says the plan in words)."""
    ref = cases.approval(str(body["actions"][0]["value"]))
    found = cases.cases.proposed_plan(ref.case_id, ref.plan_hash)
    if found is None:
        raise NotFound("the plan of this message is no longer stored")
    plan = found["plan"]
    title = str(plan.get("title") or "") if isinstance(plan, dict) else ""
    cases.client.views_open(trigger_id=body["trigger_id"], view=details_modal(title, plan))


def reject(cases: SlackCases, body: Body) -> str | None:
    """The core's answer to the modal's reason: None when the plan is rejected, else what the
    modal shows under the reason."""
    cid = correlation_id(body)
    try:
        view = body["view"]
        reason = str(view["state"]["values"][REASON_BLOCK][REASON_INPUT]["value"] or "")
        ref = cases.approval(str(json.loads(view["private_metadata"])["approval_id"]))
        reply = cases.reject(ref, str(body["user"]["id"]), reason.strip(),
                             str(body.get("trigger_id") or view.get("id") or cid), cid)
        return None if reply.error is None else failure_text(reply.error, cid)
    except Exception as error:  # the one error handler's wording, in the modal
        return failure_text(error, cid)
