"""``/case`` answers about a case only where it may (issue 24, finding 3): in the case's own
channel, to members of that channel (``conversations.members``) and to approvers; anyone else
gets one line that says nothing about the case, the same as for a case that does not exist.
``/case list`` lists the cases of the channel it is asked in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import Engine

from bot.settings import SlackSettings
from tests.support.cases import open_case
from tests.support.slack import (
    APPROVER,
    CHANNEL,
    OUTSIDER,
    REQUESTER,
    Stack,
    ask,
    running_bot,
    shown,
)

OTHER = "C0ELSEWHERE"  # a channel with no case, where the outsider asks
TITLE = "checkout returns 500s for EU shoppers"
CASE_QUESTIONS = ("catchup", "status", "timeline", "similar")
NOT_VISIBLE = ("Nothing to show: `/case` answers about a case only in its own channel, to the "
               "members of that channel and to approvers.")


@pytest.fixture
def bot(engine: Engine) -> Iterator[Stack]:
    with running_bot(engine, loop=False) as stack:
        stack.slack.members[OTHER] = [OUTSIDER, REQUESTER]
        yield stack


def opened(bot: Stack, ts: str = "1700000100.000100") -> UUID:
    """A case opened by a mention in the incident channel."""
    assert bot.mention(f"<@U0BOT> {TITLE}", event_id=f"Ev{ts}", ts=ts).status_code == 200
    bot.slack.wait_for(lambda: bot.case_of_thread(ts) is not None, what="the case")
    case_id = bot.case_of_thread(ts)
    assert case_id is not None
    return case_id


def refused(body: dict[str, Any]) -> str:
    text = shown(body)
    assert text == f"⛔ {NOT_VISIBLE}", text
    assert len(text.splitlines()) == 1
    return text


@pytest.mark.parametrize("question", CASE_QUESTIONS)
def test_a_user_in_no_incident_channel_asking_elsewhere_learns_nothing(
        bot: Stack, question: str) -> None:
    case_id = opened(bot)
    for ref in (str(case_id)[:8], str(case_id)):
        body = ask(bot, f"{question} {ref}", user=OUTSIDER, channel=OTHER)
        refused(body)
        said = str(body)
        assert TITLE not in said and str(case_id)[:8] not in said and APPROVER not in said
    # ... exactly what a case that does not exist answers
    assert shown(ask(bot, f"{question} ffff0000", user=OUTSIDER, channel=OTHER)) == \
        shown(ask(bot, f"{question} {str(case_id)[:8]}", user=OUTSIDER, channel=OTHER))
    assert shown(ask(bot, f"{question} ffff0000")) == f"⛔ {NOT_VISIBLE}"


def test_list_shows_only_the_cases_of_the_channel_it_is_asked_in(bot: Stack) -> None:
    case_id = opened(bot)
    short = str(case_id)[:8]
    for user in (OUTSIDER, REQUESTER, APPROVER):  # a member, an approver: still this channel's
        listed = ask(bot, "list", user=user, channel=OTHER)
        assert short not in str(listed) and TITLE not in str(listed)
        assert "none" in shown(listed)
    assert short not in str(ask(bot, "list new", user=OUTSIDER, channel=OTHER))
    assert short in shown(ask(bot, "list", user=OUTSIDER))  # asked in the case's channel


def test_the_cases_channel_its_members_and_approvers_are_answered(bot: Stack) -> None:
    case_id = opened(bot)
    short = str(case_id)[:8]
    bot.slack.members[CHANNEL] = [REQUESTER]  # the approver is not in the incident channel
    assert TITLE in shown(ask(bot, f"status {short}", user=OUTSIDER))  # in its own channel
    assert TITLE in shown(ask(bot, f"status {short}", user=REQUESTER, channel=OTHER))  # member
    assert TITLE in shown(ask(bot, f"catchup {short}", user=APPROVER, channel=OTHER))  # approver
    assert "case opened" in shown(ask(bot, f"timeline {short}", user=REQUESTER, channel=OTHER))
    members = bot.slack.calls("conversations.members")
    assert members and {call["channel"] for call in members} == {CHANNEL}


def test_membership_is_read_page_by_page(bot: Stack) -> None:
    case_id = opened(bot)
    bot.slack.members[CHANNEL] = [f"U0FILL{n:04d}" for n in range(2500)] + [REQUESTER]
    assert TITLE in shown(ask(bot, f"status {str(case_id)[:8]}", user=REQUESTER, channel=OTHER))
    assert len(bot.slack.calls("conversations.members")) == 3


def test_a_slack_that_cannot_say_who_is_a_member_means_no(bot: Stack) -> None:
    case_id = opened(bot)
    bot.slack.refused.add("conversations.members")
    refused(ask(bot, f"status {str(case_id)[:8]}", user=REQUESTER, channel=OTHER))
    assert TITLE in shown(ask(bot, f"status {str(case_id)[:8]}", user=APPROVER, channel=OTHER))


def test_a_case_opened_elsewhere_belongs_to_the_incident_channel_until_it_has_a_thread(
        bot: Stack) -> None:
    """A case opened over REST or by an alert, whose card has not been posted yet (no thread):
    the incident channel, where its card goes, is its channel."""
    case_id = open_case(bot.app.cases, TITLE)
    short = str(case_id)[:8]
    assert bot.app.settings.layer(SlackSettings).incident_channel == CHANNEL
    assert TITLE in shown(ask(bot, f"status {short}", user=OUTSIDER))
    assert short in shown(ask(bot, "list", user=OUTSIDER))
    refused(ask(bot, f"status {short}", user=OUTSIDER, channel=OTHER))
    assert short not in str(ask(bot, "list", user=OUTSIDER, channel=OTHER))
