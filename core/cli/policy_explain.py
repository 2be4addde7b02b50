"""``opsgate policy explain``: who may approve one plan under the approval policy and the
catalog, how many must, which policies admit or refuse one person and why, and whether the
gatekeeper would approve it by itself: in sentences, names from the catalog."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.cli.command import EXIT_BAD_SETTINGS, EXIT_FAILED, CliError
from core.cli.policy_loading import Unusable, gate_policy, said_problems
from core.policy.judge import sequence_words

if TYPE_CHECKING:
    from core.catalog import Catalog
    from core.domain.policy import ApprovalPolicy
    from core.policy.judge import Subject
    from core.settings import Settings


def explain(settings: Settings, args: argparse.Namespace) -> int:
    from core.domain.policy import AUTO_APPROVER
    from core.policy.judge import who_may

    try:
        plan = _read_plan(args.plan)
        policy = gate_policy(settings)
    except Unusable as unusable:
        return said_problems(unusable.problems)
    catalog = policy.catalog()
    components = _known_components(catalog, args.components)
    person = _person(catalog, args.person)
    now: datetime = args.at or datetime.now(UTC)
    policy = policy.at(components, now)
    subject = policy.subject(plan, args.requester)
    needed = policy.required(plan)
    lines = [
        _setting(settings, policy.version, args.requester, now),
        _touched(plan, subject),
        *_owners(catalog, subject),
        f"{_capital(policy.describe_who(subject))}; it needs {_approvers(needed)}.",
        _admitting(policy, subject),
        _who_may(catalog, who_may(policy.cedar, policy.people(), subject)),
    ]
    automatic, gatekeeper = _gatekeeper(policy, plan, subject, components)
    allowed = automatic
    if person != AUTO_APPROVER:
        allowed, verdict = _verdict(policy, catalog, person, subject, components)
        lines += verdict
    print("\n".join([*lines, gatekeeper]), flush=True)
    return 0 if allowed else EXIT_FAILED


def _read_plan(file: Path) -> dict[str, Any]:

    from core.domain.plans import plan_problems

    try:
        plan = json.loads(file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"{file}: cannot be read: {why}", exit_code=EXIT_BAD_SETTINGS) from exc
    except ValueError as exc:
        raise CliError(f"{file}: not JSON: {exc}", exit_code=EXIT_BAD_SETTINGS) from exc
    problems = plan_problems(plan)
    if problems:
        raise Unusable([f"{file}: {problem}" for problem in problems])
    assert isinstance(plan, dict), "plan_problems accepts nothing but an object"
    return plan


def _known_components(catalog: Catalog, names: Sequence[str]) -> tuple[str, ...]:
    _known, unknown = catalog.resolve(names)
    if unknown:
        known = ", ".join(catalog.components) or "none: OPSGATE_CATALOG names no components"
        raise CliError(f"--components: not in the catalog: {', '.join(unknown)} (known: "
                       f"{known})", exit_code=EXIT_BAD_SETTINGS)
    return tuple(names)


def _person(catalog: Catalog, said: str) -> str:
    """A Slack id as given, or the Slack id of the catalog user of that name."""
    user = catalog.users.get(said)
    if user is not None and catalog.user_by_slack_id(said) is None:
        if user.slack_id is None:
            raise CliError(f"--as {said}: the catalog gives this user no Slack id "
                           "(slack.com/user-id), so they can never click",
                           exit_code=EXIT_BAD_SETTINGS)
        return user.slack_id
    return said


def _called(catalog: Catalog, person: str) -> str:
    from core.domain.policy import AUTO_APPROVER

    if person == AUTO_APPROVER:
        return "the gatekeeper"
    user = catalog.user_by_slack_id(person)
    return user.called if user is not None else person


def _setting(settings: Settings, version: str, requester: str, now: datetime) -> str:
    where = (f"policy {settings.policy} (version {version})" if settings.policy is not None
             else f"the default policy (OPSGATE_POLICY is unset; version {version})")
    return f"Judged by {where} at {now:%Y-%m-%d %H:%M:%S} UTC, for a plan proposed by " \
           f"{requester}."


def _touched(plan: dict[str, Any], subject: Subject) -> str:
    from core.domain.policy import plan_risk

    risk = (f"risk {plan_risk(plan):g}" if "risk_score" in plan
            else f"risk unstated, so {plan_risk(plan):g}")
    actions = ", ".join(sorted(str(action) for action in subject.plan.actions))
    what = f'The plan "{subject.plan.title}" ({risk}; {actions})'
    unowned = "".join(f" Its {target.sentence}." for target in subject.unowned)
    if not subject.components:
        return f"{what} touches no component the catalog knows.{unowned}"
    touched = sequence_words([f"{c.name} ({c.lifecycle})" for c in subject.components])
    return f"{what} touches {touched}.{unowned}"


def _owners(catalog: Catalog, subject: Subject) -> list[str]:
    lines = []
    for owner in subject.owners:
        people = ", ".join(user.called for user in catalog.users_in(owner))
        owned = sequence_words([c.name for c in subject.components if c.owner == owner])
        lines.append(f"{owned} is owned by {owner}: {people}." if people
                     else f"{owned} is owned by {owner}, which has no members in the catalog.")
    return lines


def _approvers(count: int) -> str:
    return "one approver" if count == 1 else f"{count} distinct approvers"


def _admitting(policy: ApprovalPolicy, subject: Subject) -> str:
    from core.policy.judge import quorum_for

    permits = quorum_for(policy.cedar, policy.people(), subject).permits
    if not permits:
        return "No policy admits anyone to approve this plan."
    return f"Approvers of this plan are admitted by {_rules(policy, permits)}."


def _who_may(catalog: Catalog, people: Sequence[str]) -> str:
    if not people:
        return "Nobody the catalog or OPSGATE_APPROVERS names may approve it now."
    return f"May approve it now: {', '.join(_called(catalog, p) for p in people)}."


def _verdict(policy: ApprovalPolicy, catalog: Catalog, person: str, subject: Subject,
             components: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether one person may approve, the policies that said so, and the gate's own words."""
    judged = policy.judge(subject, person)
    called = _called(catalog, person)
    lines = [f"Cedar could not evaluate a policy for {called}: {error}"
             for error in judged.errors]
    if judged.allowed:
        enough = ("their yes alone is enough" if judged.quorum == 1
                  else f"their yes is one of the {_approvers(judged.quorum)} needed")
        return True, [*lines, f"{called} may approve it, admitted by "
                              f"{_rules(policy, judged.permits)}; {enough}."]
    why = (f"refused by {_rules(policy, judged.forbids)}" if judged.forbids
           else "no policy admits them")
    refusal = policy.refusal(person, subject.requester, subject.plan)
    return False, [*lines, f"{called} may not approve it: {why}.",
                   f"The gate would answer their click: {refusal}."]


def _gatekeeper(policy: ApprovalPolicy, plan: dict[str, Any], subject: Subject,
                components: Sequence[str]) -> tuple[bool, str]:
    """Whether the gatekeeper would approve the plan by itself, and which policy lets it."""
    from core.domain.policy import AUTO_APPROVER

    if policy.auto_approves(plan):
        permits = policy.judge(subject, AUTO_APPROVER).permits
        return True, f"The gatekeeper would approve it automatically, admitted by " \
                     f"{_rules(policy, permits)}."
    why = policy.refusal(AUTO_APPROVER, subject.requester, plan)
    return False, f"The gatekeeper would not approve it automatically: {why}."


def _rules(policy: ApprovalPolicy, names: Iterable[str]) -> str:
    """The named policies with their reasons, in the order of the policy set."""
    named = set(names)
    return sequence_words([f"policy {rule.name}" + (f" ({rule.reason})" if rule.reason else "")
                      for rule in policy.cedar.rules.values() if rule.name in named])



def _capital(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


