"""People by name, not id: ``users.info`` read once per person and kept, a group by its handle,
an id Slack does not know (or a Slack that fails) read as itself; ids inside a text replaced."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from bot.people import NAME_TTL_S, People, as_is, mentions_in, names_in


class FakeClient:
    """The two Web API methods ``People`` calls, answering as Slack does; counts the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.down = False

    def users_info(self, user: str) -> dict[str, Any]:
        self.calls.append(f"users.info {user}")
        if self.down:
            raise SlackApiError("down", {"ok": False, "error": "internal_error"})
        if user == "U0BOB":
            return {"ok": True, "user": {"id": user, "name": "bob.k", "real_name": "Bob K",
                                         "profile": {"display_name": "bob", "real_name": "Bob K"}}}
        if user == "U0CAROL":  # no display name set: the real name
            return {"ok": True, "user": {"id": user, "name": "carol",
                                         "profile": {"display_name": "", "real_name": "Carol D"}}}
        raise SlackApiError("user_not_found", {"ok": False, "error": "user_not_found"})

    def usergroups_list(self) -> dict[str, Any]:
        self.calls.append("usergroups.list")
        return {"ok": True, "usergroups": [{"id": "S0ONCALL", "handle": "oncall"}]}


def test_people_are_named_once_and_unknown_ids_read_as_themselves() -> None:
    now = [0.0]
    client = FakeClient()
    people = People(client, clock=lambda: now[0])  # type: ignore[arg-type]
    said = names_in("⛔ U0BOB is not an approver (U0CAROL, S0ONCALL, U0GONE may approve)", people)
    assert said == "⛔ bob is not an approver (Carol D, @oncall, U0GONE may approve)"
    names_in("U0BOB U0BOB S0ONCALL", people)
    assert client.calls.count("users.info U0BOB") == 1  # cached
    assert client.calls.count("usergroups.list") == 1
    now[0] += NAME_TTL_S + 1
    client.down = True
    assert people("U0BOB") == "U0BOB"  # Slack failing: the id, never an error
    assert people("WAIT_GATE") == "WAIT_GATE" and people("UTC") == "UTC"  # not ids
    assert names_in("UTC 10:00, NEW → WAIT_GATE", as_is) == "UTC 10:00, NEW → WAIT_GATE"


def test_people_in_a_slack_text_are_mentions_and_unknown_ids_stay_as_written() -> None:
    """A reason the core stored with ids reads, in Slack, as people Slack names for each reader;
    an id nobody knows (or a word that looks like one, ``S3``) is not turned into a mention."""
    people = People(FakeClient())  # type: ignore[arg-type]
    said = mentions_in("⛔ U0BOB is not an approver (U0CAROL, S0ONCALL, U0GONE may approve) "
                       "&lt;S3&gt;", people)
    assert said == ("⛔ <@U0BOB> is not an approver (<@U0CAROL>, <!subteam^S0ONCALL>, U0GONE "
                    "may approve) &lt;S3&gt;")
    assert mentions_in("U0BOB", as_is) == "U0BOB"  # no directory: nothing to vouch for the id
