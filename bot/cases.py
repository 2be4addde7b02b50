"""What the Slack listeners ask of opsgate, in the incident's words: open (or find) the case of a
thread, continue its conversation, find a case by id prefix, decide a plan. Listeners stay short:
parse, call one of these, answer.

Side effects go through the gateway (opening a case for a thread, replying in it) with business
keys made of Slack's own ids, so a retried event never opens two cases or replies twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.agent import Agent, Watch
from bot.blocks import short_id, who
from bot.card_keeper import CardKeeper
from bot.card_state import CaseState
from bot.mrkdwn import escape, from_slack
from bot.people import People
from bot.settings import SlackSettings
from bot.slack_store import ApprovalRef, SlackStore
from core.bootstrap import App
from core.cases.queries import only_one
from core.cases.replies import Reply
from core.domain.attempts import asks_retry
from core.domain.commands import ApprovePlan, ChatThread, OpenCase, RejectPlan, TransitionCase
from core.domain.fsm import CaseEvent, CaseStatus
from core.domain.views import ApprovalView, CaseView, MovedCase
from core.errors import InvalidRequest, NotFound
from core.gateway import ToolCall

log = logging.getLogger(__name__)

_POSTED_STAGES = frozenset({CaseStatus.WAIT_GATE, CaseStatus.EXECUTING, CaseStatus.VERIFYING,
                            CaseStatus.CLOSED, CaseStatus.PARKED})
"""From the gate on, the thread itself says where the case stands."""

OPEN_WAIT_S = 10.0  # a duplicate delivery waits this long for the first one's case
_MENTION = re.compile(r"<@[A-Z0-9]+(\|[^>]*)?>")
TITLE_MAX = 200
THREAD_STATUS = "is working on it…"  # Slack's assistant status: "opsgate is working on it…"
PREFIX_MATCHES = 20  # cases an id prefix may name before the asker's may be chosen among them
MEMBER_PAGES = 50  # conversations.members pages read before a user is taken for no member
NOT_VISIBLE = ("Nothing to show: `/case` answers about a case only in its own channel, to the "
               "members of that channel and to approvers.")
"""The one answer about a case the asker may not read, and about a case that does not exist:
it says nothing of the case, not even whether there is one."""


@dataclass(frozen=True)
class Asker:
    """Who asked a ``/case`` question, and in which channel."""

    user: str
    channel: str


@dataclass(frozen=True)
class SlackThread:
    """Where a message was said: the thread root is the case's thread."""

    team: str
    channel: str
    thread_ts: str

    @property
    def key(self) -> str:
        return f"{self.team}:{self.channel}:{self.thread_ts}"


def resumed_words(moved: MovedCase, words: str) -> str:
    """What the thread is told when a person re-opens planning (mrkdwn: their words escaped)."""
    said = f" with “{escape(words.strip()[:300])}”" if words.strip() else ""
    retry = " They asked for a retry: the same plan may come back." if asks_retry(words) else ""
    return (f"Planning re-opened on case `{short_id(moved['case_id'])}`{said}; the new plan "
            f"follows in this thread.{retry}")


def title_of(text: str) -> str:
    """A case title from a mention: its words without the mentions, on one line, and without
    Slack's markup (a ``<!channel>`` is the words ``@channel``, a link its label and URL)."""
    words = " ".join(from_slack(_MENTION.sub(" ", text)).split())
    return (words or "Incident reported in Slack")[:TITLE_MAX]


class SlackCases:
    """The bot's operations on opsgate."""

    def __init__(self, app: App, client: WebClient, store: SlackStore,
                 agent: Agent | None = None) -> None:
        self.app = app
        self.cases = app.cases
        self.client = client
        self.store = store
        self.agent = agent
        self.people = People(client)
        self.cards = CardKeeper(app, names=self.people)
        self.thread_status = True  # whether assistant.threads.setStatus works for this app
        self._workspace_url: str | None = None
        # where cases opened outside Slack get their thread (OPSGATE_INCIDENT_CHANNEL)
        self.incident_channel = app.settings.layer(SlackSettings).incident_channel

    # -- conversations ----------------------------------------------------------------------

    def case_for_thread(self, where: SlackThread, title: str, user: str,
                        correlation_id: str) -> tuple[UUID, bool]:
        """The case of ``where``, opened now if it has none; ``True`` when this call opened it.
        Every delivery of the same thread's first mention opens the same one case."""
        found = self.store.case_of_thread(where.team, where.channel, where.thread_ts)
        if found is not None:
            return found, False
        call = ToolCall(tool="case.open", args={"thread": where.key}, actor=user,
                        session_id=f"slack:{where.key}", business_key=f"slack-thread:{where.key}")
        thread = ChatThread(where.team, where.channel, where.thread_ts)

        def open_case(_args: Any) -> dict[str, Any]:
            cmd = OpenCase(title=title, actor=user, correlation_id=correlation_id, thread=thread)
            return {"case_id": self.cases.open_case(cmd, f"slack-thread:{where.key}")
                    .data()["case_id"]}

        result = self.app.gateway.run(call, open_case, wait_s=OPEN_WAIT_S)
        result.raise_for_error(f"opening the case of thread {where.key}")
        return UUID(str(result.result["case_id"])), result.status == "ok"

    def converse(self, case_id: UUID, where: SlackThread, text: str, *, user: str,
                 opened: bool, event_id: str, addressed: bool = False) -> str:
        """Hand ``text`` to the agent (or, without one, acknowledge) and reply in the thread,
        once per Slack event; the thread shows the agent working until the reply is posted.
        A message ``addressed`` to the bot in a PARKED case's thread re-opens its planning with
        the person's words instead (``resume``)."""
        if addressed and not opened and \
                self.cases.get_case(case_id)["status"] == CaseStatus.PARKED:
            moved = self.resume(case_id, title_of(text), user, f"slack-event:{event_id}",
                                correlation_id=event_id)
            reply = resumed_words(moved, title_of(text))
            self.say(where, reply, business_key=f"reply:{event_id}")
            return reply
        if self.agent is None:
            reply = (f"Opened case `{short_id(case_id)}` for this thread. Its analysis, the "
                     "proposed plan and the approval buttons will appear here.") if opened \
                else f"Noted on case `{short_id(case_id)}`."
            self.say(where, reply, business_key=f"reply:{event_id}")
            return reply
        with self.working(case_id, where, user) as watch:
            reply = self.agent.converse(case_id, text, user=user, correlation_id=event_id,
                                        watch=watch)
            composed = str(self.cases.get_case(case_id)["status"])  # what the reply knew
            self.say(where, escape(reply), business_key=f"reply:{event_id}",
                     unless_moved=(case_id, composed))
        return reply

    def moved_on(self, case_id: UUID, composed: str) -> bool:
        """Whether the case reached the gate or a later stage (the plan message, a decision,
        an outcome: what the thread already shows) after a reply was composed in status
        ``composed``, before it: such a reply is stale. The analysis moving on is not."""
        now = str(self.cases.get_case(case_id)["status"])
        return now != composed and now in _POSTED_STAGES and composed not in _POSTED_STAGES

    @contextmanager
    def working(self, case_id: UUID, where: SlackThread, user: str) -> Iterator[Watch]:
        """While the agent works on ``user``'s message: Slack's own status in the thread
        (``assistant.threads.setStatus``) where the app has it, else a context line on the case
        card; either clears when the turn ends. Yields what the agent tells of each look
        ("querying http_5xx_ratio for payments-api"), which replaces the line in place."""
        if self._set_thread_status(where, THREAD_STATUS):
            try:
                yield lambda looking: self._thread_status(where, f"is {looking}…")
            finally:
                self._set_thread_status(where, "")
            return
        self.cards.working(case_id, f"opsgate is working on {who(user)}'s message…")
        try:
            # What a look names came from the model and the catalog: escaped for mrkdwn.
            yield lambda looking: self.cards.working(case_id, f"opsgate is {escape(looking)}…")
        finally:
            self.cards.working(case_id, None)

    def _thread_status(self, where: SlackThread, status: str) -> None:
        self._set_thread_status(where, status)

    def _set_thread_status(self, where: SlackThread, status: str) -> bool:
        """Whether Slack took the thread status; an app without it (not an AI app, an older
        workspace, a sandbox) is asked once, then the card shows the working line instead."""
        if not self.thread_status:
            return False
        try:
            self.client.assistant_threads_setStatus(channel_id=where.channel,
                                                    thread_ts=where.thread_ts, status=status)
            return True
        except SlackApiError as refused:
            self.thread_status = False
            log.info("assistant.threads.setStatus refused (%s): the case card shows when the "
                     "agent works", refused.response.get("error"))
            return False

    def say(self, where: SlackThread, text: str, *, business_key: str,
            blocks: list[dict[str, Any]] | None = None,
            unless_moved: tuple[UUID, str] | None = None) -> None:
        """Post ``text`` (mrkdwn: what came from outside is escaped) in the thread, once per
        business key; with ``unless_moved`` (a case and the status the text was composed in),
        not at all when the case has moved on to the gate or past it (a stale reply)."""
        call = ToolCall(tool="slack.reply", args={"channel": where.channel,
                                                  "thread_ts": where.thread_ts, "text": text},
                        actor="slack-bot", session_id=f"slack:{where.key}",
                        business_key=business_key)
        def post(args: Any) -> dict[str, Any]:
            if unless_moved is not None and self.moved_on(*unless_moved):
                log.info("reply %s dropped: case %s moved on since it was composed",
                         business_key, unless_moved[0])
                return {"dropped": "the case moved on since the reply was composed"}
            reply = self.client.chat_postMessage(channel=args["channel"],
                                                 thread_ts=args["thread_ts"], text=args["text"],
                                                 blocks=blocks)
            return {"ts": reply["ts"], "channel": reply["channel"]}

        result = self.app.gateway.run(call, post, wait_s=5.0)
        result.raise_for_error(f"reply in thread {where.key}")

    def start_thread(self, team: str, channel: str, text: str, *,
                     business_key: str) -> SlackThread:
        """Post ``text`` as a new thread's first message in ``channel``, once per business
        key (a retried command finds the thread its first delivery started)."""
        call = ToolCall(tool="chat.post", args={"channel": channel, "text": text},
                        actor="slack-bot", session_id=f"slack:{team}:{channel}",
                        business_key=business_key)

        def post(args: Any) -> dict[str, Any]:
            reply = self.client.chat_postMessage(channel=args["channel"], text=args["text"])
            return {"ts": reply["ts"], "channel": reply["channel"]}

        # Not idempotent: a post that may have happened without its result stored is left for
        # reconciliation rather than posted twice.
        result = self.app.gateway.run(call, post, wait_s=5.0)
        result.raise_for_error(f"the first message of a thread in {channel}")
        return SlackThread(team, channel, str(result.result["ts"]))

    def edit(self, where: SlackThread, text: str, *, business_key: str) -> None:
        """Replace the thread's first message with ``text``, once per business key."""
        call = ToolCall(tool="chat.update", args={"channel": where.channel,
                                                  "ts": where.thread_ts, "text": text},
                        actor="slack-bot", session_id=f"slack:{where.key}",
                        business_key=business_key)

        def update(args: Any) -> dict[str, Any]:
            reply = self.client.chat_update(channel=args["channel"], ts=args["ts"],
                                            text=args["text"])
            return {"ts": reply["ts"]}

        result = self.app.gateway.run(call, update, idempotent=True, wait_s=5.0)
        result.raise_for_error(f"the first message of thread {where.key}")

    def workspace_url(self) -> str:
        """The workspace's URL (``auth.test``, once), ending in ``/``."""
        if self._workspace_url is None:
            url = str(self.client.auth_test().get("url") or "https://slack.com/")
            self._workspace_url = url if url.endswith("/") else f"{url}/"
        return self._workspace_url

    # -- /case ------------------------------------------------------------------------------

    def find_case(self, prefix: str, asker: Asker) -> CaseView:
        """The case whose id starts with ``prefix`` (``CaseService.find_case_id``'s rule) among
        those ``asker`` may read; none of those is ``NotFound`` with ``NOT_VISIBLE``, whether
        the case is another channel's or there is none."""
        readable = [case_id for case_id in self.cases.case_ids_matching(prefix,
                                                                        limit=PREFIX_MATCHES)
                    if self.may_read(case_id, asker)]
        if not readable:
            raise NotFound(NOT_VISIBLE)
        return self.cases.get_case(only_one(prefix, readable))

    def may_read(self, case_id: UUID, asker: Asker) -> bool:
        """Whether ``asker`` may read the case: asked in the case's own channel, or by a member
        of that channel, or by an approver (the approval policy's list, groups included). A
        case's channel is its thread's; a case opened elsewhere with no thread yet belongs to
        the incident channel, where its card goes (none configured: approvers only)."""
        thread = self.store.thread_of_case(case_id)
        channel = self.incident_channel if thread is None else thread.channel
        if channel and channel == asker.channel:
            return True
        if self.app.policy.may_approve(asker.user):
            return True
        return bool(channel) and self.is_member(str(channel), asker.user)

    def is_member(self, channel: str, user: str) -> bool:
        """Whether ``user`` is in ``channel`` (``conversations.members``, page by page); when
        Slack cannot say, they are not."""
        cursor: str | None = None
        try:
            for _ in range(MEMBER_PAGES):
                page = self.client.conversations_members(channel=channel, cursor=cursor,
                                                         limit=1000)
                if user in (page.get("members") or []):
                    return True
                cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
                if cursor is None:
                    return False
        except SlackApiError as refused:
            log.warning("conversations.members %s refused (%s): %s is taken for no member",
                        channel, refused.response.get("error"), user)
        return False

    def evidence(self, prefix: str, asker: Asker) -> dict[str, Any]:
        """What the librarian knows for the case ``prefix`` names: its findings, similar past
        cases (top 3, with what resolved them), relevant runbooks and the best plan."""
        case = self.find_case(prefix, asker)
        return self.app.library.evidence_for(UUID(str(case["case_id"])))

    def catchup(self, prefix: str, asker: Asker) -> CaseState:
        """The case ``prefix`` names, as the card and the catch-up show it."""
        case_id = UUID(str(self.find_case(prefix, asker)["case_id"]))
        return self.cards.state(case_id, self.cards.store.card(case_id))

    def list_cases(self, status: str | None, asker: Asker) -> list[CaseView]:
        """The newest cases of the channel ``asker`` asks in (only those; in the incident
        channel, the cases with no thread yet too)."""
        wanted = None
        if status:
            try:
                wanted = CaseStatus(status.upper())
            except ValueError:
                raise InvalidRequest(f"`{status}` is not a case status "
                                     f"({', '.join(s.value for s in CaseStatus)})") from None
        home = asker.channel == self.incident_channel  # see ``may_read``
        return self.cases.list_cases(wanted, limit=20, channels=[asker.channel],
                                     threadless=home)

    # -- re-opening a PARKED case -----------------------------------------------------------

    def resume(self, case_id: UUID, words: str, user: str, key: str, *,
               correlation_id: str) -> MovedCase:
        """``user`` re-opens planning on the PARKED case with ``words`` (their suggestion, or
        ``retry`` for the same plan again), once per ``key``: the case moves to PLANNING and the
        planner starts from their words and the failed attempt. ``IllegalTransition`` when the
        case is not PARKED."""
        suggestion = words.strip()
        cmd = TransitionCase(case_id, CaseEvent.RESUME, actor=user,
                             reason=suggestion[:500] or "planning re-opened from Slack",
                             meta={"suggestion": suggestion[:2000],
                                   "retry": asks_retry(suggestion)},
                             correlation_id=correlation_id)
        return self.cases.transition(cmd, f"slack:resume:{key}").data()

    # -- the gate ---------------------------------------------------------------------------

    def approval(self, approval_id: str) -> ApprovalRef:
        ref = self.store.approval(approval_id)
        if ref is None:
            raise NotFound("this button belongs to no plan opsgate knows")
        return ref

    def approve(self, ref: ApprovalRef, user: str, click: str,
                correlation_id: str) -> Reply[ApprovalView]:
        """``user``'s yes by one ``click`` (Slack's ``action_ts``): a repeated delivery of the
        click replays its answer; a second click is asked anew, and the core records no second
        yes nor a second decision."""
        cmd = ApprovePlan(ref.case_id, ref.plan_hash, user, correlation_id=correlation_id,
                          expected_version=ref.case_version)
        return self.cases.approve_plan(cmd, f"slack:approve:{ref.approval_id}:{user}:{click}")

    def reject(self, ref: ApprovalRef, user: str, reason: str, click: str,
               correlation_id: str) -> Reply[MovedCase]:
        cmd = RejectPlan(ref.case_id, ref.plan_hash, user, reason, correlation_id=correlation_id,
                         expected_version=ref.case_version)
        return self.cases.reject_plan(cmd, f"slack:reject:{ref.approval_id}:{user}:{click}")

    def may_reject(self, ref: ApprovalRef, user: str) -> bool:
        """Whether the core would accept ``user``'s no to ``ref`` now (asked before the modal
        opens, so nobody types a reason only to be refused): the gate's answer, not the bot's."""
        return self.cases.may_reject(ref.case_id, ref.plan_hash, user,
                                     expected_version=ref.case_version)
