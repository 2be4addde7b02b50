"""People by their names, not their ids: a Slack user id read as the person's display name
(``users.info``, cached) and a user group's id as its handle (``usergroups.list``, cached), for
every text the bot writes that is not a mention — refusals, the approvers line, the card,
catch-up. An id Slack does not know (or a Slack that cannot be asked) reads as itself: a name is
a courtesy, never a reason to fail a message."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

log = logging.getLogger(__name__)

Names = Callable[[str], str]
"""How a person's id reads: their name, or the id itself when no name is known."""

NAME_TTL_S = 3600.0
UNKNOWN_TTL_S = 300.0
_USER_ID = re.compile(r"\b[UW][A-Z0-9]*[0-9][A-Z0-9]*\b")
_GROUP_ID = re.compile(r"\bS[A-Z0-9]*[0-9][A-Z0-9]*\b")
_ANY_ID = re.compile(r"\b[UWS][A-Z0-9]*[0-9][A-Z0-9]*\b")


def as_is(person: str) -> str:
    """No names known: an id reads as itself."""
    return person


def names_in(text: str, names: Names) -> str:
    """``text`` with every Slack user id in it read as the person's name (and every user group
    id as its handle)."""
    return _ANY_ID.sub(lambda found: names(found.group(0)), text)


def mentions_in(mrkdwn: str, names: Names) -> str:
    """``mrkdwn`` (already escaped) with the id of every person Slack knows drawn as their
    mention (Slack shows each reader the name; a mention in a message someone reads is how Slack
    names people) and every user group's as its mention; an id nobody knows stays as written
    (an ``S3`` in a sentence is not a group)."""
    def drawn(found: re.Match[str]) -> str:
        person = found.group(0)
        if names(person) == person:
            return person
        return f"<!subteam^{person}>" if person.startswith("S") else f"<@{person}>"
    return _ANY_ID.sub(drawn, mrkdwn)


class People:
    """Display names from ``users.info`` and group handles from ``usergroups.list``, kept an
    hour (an unknown id five minutes)."""

    def __init__(self, client: WebClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._known: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, person: str) -> str:
        return self.name(person)

    def name(self, person: str) -> str:
        """``person``'s display name (else real name, else user name); the id when unknown."""
        if _GROUP_ID.fullmatch(person):
            return self._handle(person)
        if not _USER_ID.fullmatch(person):
            return person
        now = self._clock()
        with self._lock:
            known = self._known.get(person)
        if known is not None and known[1] > now:
            return known[0]
        name, ttl = self._ask(person)
        with self._lock:
            self._known[person] = (name, now + ttl)
        return name

    def _handle(self, group: str) -> str:
        """``@handle`` of the user group ``group`` (every group read in one call)."""
        now = self._clock()
        with self._lock:
            known = self._known.get(group)
        if known is not None and known[1] > now:
            return known[0]
        try:
            groups = self._client.usergroups_list().get("usergroups") or []
        except (SlackApiError, OSError) as error:
            log.info("usergroups.list: %s", error)
            groups = []
        handles = {str(g.get("id")): f"@{g['handle']}" for g in groups
                   if isinstance(g, dict) and g.get("handle")}
        with self._lock:
            for found, handle in handles.items():
                self._known[found] = (handle, now + NAME_TTL_S)
            if group not in handles:
                self._known[group] = (group, now + UNKNOWN_TTL_S)
        return handles.get(group, group)

    def _ask(self, person: str) -> tuple[str, float]:
        try:
            user = self._client.users_info(user=person).get("user") or {}
        except (SlackApiError, OSError) as error:
            log.info("users.info %s: %s", person, error)
            return person, UNKNOWN_TTL_S
        profile = user.get("profile") or {}
        for name in (profile.get("display_name"), profile.get("real_name"),
                     user.get("real_name"), user.get("name")):
            if isinstance(name, str) and name.strip():
                return " ".join(name.split())[:80], NAME_TTL_S
        return person, UNKNOWN_TTL_S
