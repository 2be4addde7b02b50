"""The rule a plan waits on, as people are told it before they click: the components the plan's
steps change and their owners, the steps nobody owns (then nobody may approve), who may
approve and how many (the permits that apply), and the forbids that refuse everyone they do
not exempt (a deploy freeze, "no scripts in production").

Pure: the approval policy (Cedar) answers; the Slack plan message, the card and
``opsgate policy explain`` say it in words.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.policy import ApprovalPolicy, PlanLike
from core.policy.judge import quorum_for
from core.policy.rules import REQUESTER_RULE, UNOWNED_RULE

NOBODY = "opsgate:nobody"
"""The probe of "whom does a forbid refuse": a person in no group, so a forbid that refuses
them refuses everyone it does not exempt by group."""


@dataclass(frozen=True)
class Touched:
    """A component a plan touches, with its owner and lifecycle."""

    component: str
    owner: str
    lifecycle: str


@dataclass(frozen=True)
class Forbidden:
    """A forbid that refuses everyone it does not exempt, with its ``@reason``."""

    policy: str
    reason: str | None


@dataclass(frozen=True)
class GateRule:
    """Who decides one plan: ``needed`` distinct people among ``who`` (groups by catalog name
    or Slack id, people by Slack id), by ``policies``; ``default`` when the shipped policy
    decides (``who`` is then the approver list)."""

    needed: int
    who: tuple[str, ...]
    policies: tuple[str, ...]
    touched: tuple[Touched, ...]
    forbidden: tuple[Forbidden, ...]
    default: bool
    unowned: tuple[str, ...] = ()  # a sentence per step nobody owns: nobody may approve


def gate_rule(policy: ApprovalPolicy, plan: PlanLike, requester: str) -> GateRule:
    """The rule ``plan`` (proposed for ``requester``) waits on under ``policy`` as it stands
    (``policy.at(...)`` names the case's components and the moment)."""
    subject = policy.subject(plan, requester)
    standing = quorum_for(policy.cedar, policy.people(), subject)
    who = tuple(sorted(policy.approvers)) if policy.cedar.default else standing.who
    refused = policy.judge(subject, NOBODY).forbids
    forbidden = tuple(Forbidden(rule.name, rule.reason) for rule in policy.cedar.named(refused)
                      if rule.name not in (REQUESTER_RULE, UNOWNED_RULE))
    touched = tuple(Touched(c.name, c.owner, c.lifecycle) for c in subject.components)
    unowned = tuple(target.sentence for target in subject.unowned)
    return GateRule(standing.needed, () if unowned else who, standing.permits, touched,
                    forbidden, policy.cedar.default, unowned)
