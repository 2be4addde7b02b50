"""Every id Slack sends back to the bot: the slash command, button action ids, the modal's
callback id and its input block. ``manifest.yml`` and the listeners both name them from here."""

from __future__ import annotations

from enum import StrEnum

COMMAND = "/case"
"""The slash command; its subcommands are ``Subcommand``."""


class Subcommand(StrEnum):
    NEW = "new"
    STATUS = "status"
    TIMELINE = "timeline"
    LIST = "list"
    SIMILAR = "similar"
    CATCHUP = "catchup"
    RESUME = "resume"
    HELP = "help"


class Action(StrEnum):
    """The ``action_id`` of each button; the button's ``value`` is an approval id."""

    APPROVE = "plan_approve"
    REJECT = "plan_reject"
    DETAILS = "plan_details"  # opens the plan's exact JSON


FINDING_LINK = "finding_link_"
"""The start of the ``action_id`` of a finding's ``Query`` button, on findings messages of earlier
releases (none is posted now): a link button, acknowledged and otherwise ignored."""


class View(StrEnum):
    """The ``callback_id`` of each modal."""

    REJECT_REASON = "plan_reject_reason"


REASON_BLOCK = "reject_reason"
REASON_INPUT = "reason"
