"""Slack user groups on the approver list (``OPSGATE_APPROVERS`` ids starting with ``S``): who is
in them, from memory. The approval policy asks inside the case's transaction, so the members are
read from Slack (``usergroups.users.list``) in the background and served from a cache; a group
not read yet has no members (fail closed)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.settings import SlackSettings
from core.policy.judge import GroupMembers
from core.settings import Settings

log = logging.getLogger(__name__)

REFRESH_S = 300.0


def is_group(approver: str) -> bool:
    return approver.startswith("S")


def named_user_groups(settings: Settings) -> list[str]:
    """The Slack user groups the policies and the catalog name (as they are at start; a group
    first named by a later catalog edit is read after a restart)."""
    from core.catalog.files import catalog_of
    from core.policy.files import load_rules
    from core.policy.judge import is_slack_group

    named = [] if settings.policy is None else sorted(
        g for g in load_rules(settings.policy).named_groups if is_slack_group(g))
    catalog = catalog_of(settings.catalog)
    return named + sorted(g.slack_group for g in catalog.groups.values() if g.slack_group)


class SlackGroups:
    """``members(group_id)`` over a cache that a daemon thread refreshes every ``refresh_s``."""

    def __init__(self, client: WebClient, groups: Iterable[str], *,
                 refresh_s: float = REFRESH_S) -> None:
        self.client = client
        self.groups = tuple(groups)
        self.refresh_s = refresh_s
        self._members: dict[str, frozenset[str]] = {}
        self._stop = threading.Event()

    def __call__(self, group: str) -> Collection[str]:
        return self._members.get(group, frozenset())

    def refresh(self) -> None:
        """Read every group's members now; a group Slack will not list keeps its last members."""
        for group in self.groups:
            try:
                users = self.client.usergroups_users_list(usergroup=group).get("users") or []
            except SlackApiError as exc:
                log.warning("usergroups.users.list %s: %s", group, exc.response.get("error"))
                continue
            self._members = {**self._members, group: frozenset(str(u) for u in users)}

    def start(self) -> SlackGroups:
        thread = threading.Thread(target=self._run, name="slack-groups", daemon=True)
        thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # a network failure: keep the cache, try again later
                log.exception("refreshing Slack user groups failed")
            self._stop.wait(self.refresh_s)


def group_members(settings: Settings) -> GroupMembers | None:
    """The resolver of the Slack user groups that decide approvals: those on the approver list,
    and, when Slack is in the directory (``OPSGATE_DIRECTORY=slack``), those the policies name
    (``Group::"S…"``) and those the catalog's groups name (``slack.com/usergroup-id``); None
    when there are none (or no Slack)."""
    from bot.app import web_client
    from core.catalog.directory import Directory

    named = named_user_groups(settings) if Directory.parse(settings.directory).slack else []
    groups = list(dict.fromkeys([*(a for a in settings.approvers if is_group(a)), *named]))
    slack = settings.layer(SlackSettings)
    if not groups or slack.slack_bot_token is None:
        return None
    return SlackGroups(web_client(slack), groups).start()
