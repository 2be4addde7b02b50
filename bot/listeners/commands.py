"""``/case new|status|timeline|list|similar|catchup|resume|help``: answered in the ack, ephemeral
(only the asker needs it); ``new`` starts the case's thread in the channel right after the ack;
``resume`` re-opens planning on a PARKED case, as the asker, with their words. Unknown
subcommands get the help."""

from __future__ import annotations

from uuid import UUID

from slack_bolt import Ack
from slack_bolt import App as Bolt

from bot.blocks import (
    TIMELINE_ROWS,
    Message,
    case_list,
    case_similar,
    case_status,
    case_timeline,
    ephemeral,
    help_message,
    plain,
    short_id,
    who,
)
from bot.card import catchup_message
from bot.cases import Asker, SlackCases, resumed_words, title_of
from bot.failures import correlation_id, failure_text
from bot.ids import COMMAND, Subcommand
from bot.listeners import Body, lazy
from bot.mrkdwn import escape


def register(bolt: Bolt, cases: SlackCases) -> None:
    def answer(ack: Ack, body: Body) -> None:
        ack(**ephemeral(respond(cases, body)))

    bolt.command(COMMAND)(ack=answer,
                          lazy=[lazy(lambda body: open_case(cases, body), cases)])


def parse(body: Body) -> tuple[str, str]:
    subcommand, _, rest = str(body.get("text") or "").strip().partition(" ")
    return subcommand.lower(), rest.strip()


def respond(cases: SlackCases, body: Body) -> Message:
    """The ephemeral answer to one ``/case``; refusals and failures answer too."""
    subcommand, rest = parse(body)
    asker = Asker(str(body.get("user_id") or ""), str(body.get("channel_id") or ""))
    try:
        if subcommand == Subcommand.RESUME:
            return resume(cases, rest, asker, correlation_id(body))
        return answer_for(cases, subcommand, rest, asker)
    except Exception as error:  # the one error handler's wording, in the ack itself
        return plain(escape(failure_text(error, correlation_id(body))))


def answer_for(cases: SlackCases, subcommand: str, rest: str, asker: Asker) -> Message:
    """The answer to ``asker``: about a case only when they may read it (``find_case``); a
    list of the cases of the channel they ask in."""
    if subcommand == Subcommand.NEW:
        if not rest:
            return help_message(f"`{COMMAND} new` needs a title.")
        return plain(f"Opening case “{escape(title_of(rest))}”: its thread starts in this "
                     "channel.")
    if subcommand in (Subcommand.STATUS, Subcommand.TIMELINE):
        if not rest:
            return help_message(f"`{COMMAND} {subcommand}` needs a case id (or its start).")
        case = cases.find_case(rest.split()[0], asker)
        if subcommand == Subcommand.STATUS:
            return case_status(case)
        tail, total = cases.cases.timeline_tail(UUID(case["case_id"]), TIMELINE_ROWS)
        return case_timeline(case, tail, cases.people, total=total)
    if subcommand == Subcommand.SIMILAR:
        if not rest:
            return help_message(f"`{COMMAND} similar` needs a case id (or its start).")
        return case_similar(cases.evidence(rest.split()[0], asker))
    if subcommand == Subcommand.CATCHUP:
        if not rest:
            return help_message(f"`{COMMAND} catchup` needs a case id (or its start).")
        return catchup_message(cases.catchup(rest.split()[0], asker))
    if subcommand == Subcommand.LIST:
        status = rest.split()[0] if rest else None
        return case_list(cases.list_cases(status, asker), status.upper() if status else None)
    if subcommand in ("", Subcommand.HELP):
        return help_message()
    return help_message(f"Unknown subcommand `{escape(subcommand)}`.")


def resume(cases: SlackCases, rest: str, asker: Asker, command: str) -> Message:
    """``/case resume <id> [what to try]``: the asker (Slack's signed user id) re-opens planning
    on a PARKED case they may read, once per command; their words reach the planner."""
    ref, _, words = rest.partition(" ")
    if not ref:
        return help_message(f"`{COMMAND} resume` needs a case id (or its start).")
    case = cases.find_case(ref, asker)
    moved = cases.resume(UUID(case["case_id"]), words, asker.user, command,
                         correlation_id=command)
    return plain(resumed_words(moved, words))


def open_case(cases: SlackCases, body: Body) -> None:
    """After the ack of ``/case new <title>``: the thread's first message, then the case, then
    the message names it; each once per command (Slack's trigger id), so a retried command
    posts nothing twice."""
    subcommand, rest = parse(body)
    if subcommand != Subcommand.NEW or not rest:
        return
    title, user, channel = title_of(rest), str(body["user_id"]), str(body["channel_id"])
    command = correlation_id(body)
    where = cases.start_thread(str(body.get("team_id") or ""), channel,
                               f"🚨 {escape(title)} — opened by {who(user)} with `{COMMAND} new`",
                               business_key=f"case-new:{command}")
    case_id, _ = cases.case_for_thread(where, title, user, command)
    cases.edit(where, f"🚨 Case `{short_id(case_id)}` · {escape(title)} — opened by {who(user)}; "
                      "updates follow in this thread", business_key=f"case-new:{command}:named")
