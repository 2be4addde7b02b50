"""``opsgate policy check|default|schema|explain|changes``: the approval policy in Cedar
(OPSGATE_POLICY) as the gate reads it: whether it loads against the schema and the catalog, the
shipped default to start from, who may approve one plan and why, and (from the database) who
gained and lost approval rights. Only ``changes`` needs a database. Policies or a
catalog with problems print one line per problem on stderr and exit 2, never a traceback."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.command import Command
from core.cli.policy_loading import gate_policy, said_problems

if TYPE_CHECKING:
    from core.catalog import Catalog, CatalogProblem
    from core.policy.rules import PolicyProblem
    from core.settings import Settings

_POLICY_HELP = "a .cedar file, or a folder of them read recursively (default: $OPSGATE_POLICY; " \
               "unset: the shipped default policy)"
_CATALOG_HELP = "a Backstage catalog-info.yaml file, or a folder of *.yaml files (default: " \
                "$OPSGATE_CATALOG)"
_SETTINGS = "Settings come from the environment: OPSGATE_POLICY, OPSGATE_CATALOG, " \
            "OPSGATE_APPROVERS (the members of Group::\"opsgate-approvers\"), " \
            "OPSGATE_TWO_PERSON_RISK, OPSGATE_AUTO_APPROVE and OPSGATE_AUTO_APPROVE_MAX_RISK."
_EXPLAIN_EXAMPLE = """\
exit status: 0 when the person of --as may approve the plan now, 1 when not, 2 when the plan,
the policies or the catalog cannot be read.

example:
  opsgate policy explain --plan plan.json --as U0CAROL \\
      --policy docs/examples/policies --catalog docs/examples/catalog
"""


def policy_arguments(parser: argparse.ArgumentParser) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="policy_action", metavar="ACTION", required=True)
    checked = actions.add_parser(
        "check", help="check the policies against the schema and the catalog",
        description="Read every policy of OPSGATE_POLICY (or the shipped default while it is "
                    "unset), check each against opsgate's Cedar schema (`opsgate policy "
                    "schema`) and the groups and components it names against the catalog: "
                    "one line per problem (file, policy, what is wrong) and exit 2, or one "
                    "line saying what decides and its version (the one approvals record). "
                    + _SETTINGS,
        epilog="example:\n  opsgate policy check --policy docs/examples/policies "
               "--catalog docs/examples/catalog\n", formatter_class=raw)
    _sources(checked)
    actions.add_parser(
        "default", help="print the shipped default policy for these settings",
        description="Print the Cedar text of the shipped default policy, rendered with this "
                    "installation's OPSGATE_TWO_PERSON_RISK, OPSGATE_AUTO_APPROVE and "
                    "OPSGATE_AUTO_APPROVE_MAX_RISK; OPSGATE_APPROVERS are the members of "
                    "Group::\"opsgate-approvers\". Then, commented out, the rule that is always "
                    "on whatever OPSGATE_POLICY says (never-the-requester). Copy it as the start "
                    "of your own policy.",
        epilog="example:\n  opsgate policy default > policies/approvers.cedar\n"
               "  OPSGATE_POLICY=policies opsgate policy check\n", formatter_class=raw)
    actions.add_parser(
        "schema", help="print opsgate's Cedar schema",
        description="Print the Cedar schema every policy is checked against: the entities "
                    "(User, Group, Component, Plan and its attributes), the actions approve "
                    "and auto_approve, and the context (now).",
        epilog="example:\n  opsgate policy schema > opsgate.cedarschema\n",
        formatter_class=raw)
    explained = actions.add_parser(
        "explain", help="who may approve a plan, and why",
        description="Judge one ChangePlan as the gate would: the components it touches and "
                    "their owners, who may approve it and how many must, whether the person of "
                    "--as may, which policies admitted or refused them and why, and whether "
                    "the gatekeeper would approve it by itself. " + _SETTINGS,
        epilog=_EXPLAIN_EXAMPLE, formatter_class=raw)
    explained.add_argument("--plan", metavar="FILE", type=Path, required=True,
                           help="a ChangePlan as JSON (title, risk_score, steps, rollback, "
                                "verify)")
    explained.add_argument("--as", metavar="U…", dest="person", required=True,
                           help="who would click Approve: a Slack user id, a catalog user's "
                                "name, or gatekeeper")
    explained.add_argument("--requester", metavar="U…|agent", default="agent",
                           help="who proposed the plan, who never approves it (default: agent)")
    explained.add_argument("--components", metavar="A,B", type=_names, default=(),
                           help="the case's components (catalog names), which count for the "
                                "steps without a target the catalog knows (default: none)")
    explained.add_argument("--at", metavar="ISO8601", type=_instant, default=None,
                           help="when the click is judged (context.now), e.g. "
                                "2026-12-24T09:00:00Z (default: now; without an offset: UTC)")
    _sources(explained)
    changed = actions.add_parser(
        "changes", help="who gained and lost approval rights, when, after which files changed",
        description="The audit of who may approve what: each time a catalog, policy or "
                    "directory reload added or removed a person from an approving group (the "
                    "policies' groups, the owners, opsgate-approvers), recorded by `opsgate "
                    "serve` with the files that changed. Newest first. Reads the database "
                    "(OPSGATE_DATABASE_URL).",
        epilog="example:\n  opsgate policy changes --limit 5\n", formatter_class=raw)
    changed.add_argument("--limit", metavar="N", type=_count_of_changes, default=20,
                         help="how many changes to show, newest first (default: 20)")


def _count_of_changes(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number from 1 to 1000")
    return int(text)


def _sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", metavar="PATH", type=Path, help=_POLICY_HELP)
    parser.add_argument("--catalog", metavar="PATH", type=Path, help=_CATALOG_HELP)


def _names(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 instant; expected e.g. "
                                         "2026-12-24T09:00:00Z") from None
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def run_policy(args: argparse.Namespace) -> int:
    from core.settings import load_settings

    if args.policy_action == "schema":  # needs no setting
        from core.policy.rules import schema_text

        print(schema_text(), end="", flush=True)
        return 0
    if args.policy_action == "changes":
        return _changes(args)
    named = {"policy": getattr(args, "policy", None), "catalog": getattr(args, "catalog", None)}
    settings = load_settings(**{name: path for name, path in named.items() if path is not None})
    if args.policy_action == "check":
        return _check(settings)
    if args.policy_action == "default":
        print(_default_text(settings), end="", flush=True)
        return 0
    from core.cli.policy_explain import explain

    return explain(settings, args)


# -- check ------------------------------------------------------------------------------------

def _check(settings: Settings) -> int:
    """Every problem of the policies and the catalog, or one line on what decides."""
    from core.catalog import CatalogError, catalog_of
    from core.policy.files import catalog_problems, load_rules
    from core.policy.rules import PolicyError

    problems: list[PolicyProblem | CatalogProblem] = []
    catalog = rules = None
    try:
        catalog = catalog_of(settings.catalog)
    except CatalogError as error:
        problems += error.problems
    if settings.policy is not None:
        try:
            rules = load_rules(settings.policy)
        except PolicyError as error:
            problems += error.problems
        if rules is not None and catalog is not None:
            problems += catalog_problems(rules, catalog)
    if problems:
        return said_problems(problems)
    policy = gate_policy(settings)
    own = [rule.name for rule in policy.cedar.rules.values()
           if rule.source != "opsgate:always.cedar"]  # the always-on rule is in every set
    where = (f"policy {settings.policy}" if settings.policy is not None
             else "the default policy (OPSGATE_POLICY is unset)")
    print(f"{where}: {_count(len(own), 'policy', 'policies')} ({', '.join(own)}), "
          f"{_catalog_words(settings.catalog, policy.catalog())}; version {policy.version}",
          flush=True)
    return 0


def _catalog_words(path: Path | None, catalog: Catalog) -> str:
    if path is None:
        return "no catalog (OPSGATE_CATALOG is unset)"
    size = ", ".join(_count(n, word, f"{word}s") for n, word in (
        (len(catalog.components), "component"), (len(catalog.groups), "group"),
        (len(catalog.users), "user")))
    return f"catalog {path}: {size}"


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


# -- changes ----------------------------------------------------------------------------------

def _changes(args: argparse.Namespace) -> int:
    """Who gained and lost approval rights, newest first."""
    import sys

    from core.cli.app import opened_app, settings_of
    from core.ops.rights import changes

    with opened_app(settings_of(args), notes=sys.stderr) as app:
        found = changes(app.engine, args.limit)
    if not found:
        print("no change of who may approve what is recorded yet (`opsgate serve` records "
              "them)", flush=True)
        return 0
    for change in found:
        print("\n".join(change.lines()), flush=True)
    return 0


# -- default ----------------------------------------------------------------------------------

def _default_text(settings: Settings) -> str:
    """The default policy as rendered for ``settings``, then the always-on rule commented out:
    read_rules adds it to every policy set, so a copy that kept it would name it twice."""
    from core.policy.rules import default_rules

    rules = default_rules(two_person_risk=settings.two_person_risk,
                          auto_approve=settings.auto_approve,
                          auto_approve_max_risk=settings.auto_approve_max_risk)
    rendered = (f"// Rendered for OPSGATE_TWO_PERSON_RISK={settings.two_person_risk:g}, "
                f"OPSGATE_AUTO_APPROVE={settings.auto_approve},\n"
                f"// OPSGATE_AUTO_APPROVE_MAX_RISK={settings.auto_approve_max_risk:g}.\n")
    parts = [rendered]
    for source, text in rules.texts:
        if source == "opsgate:always.cedar":
            parts.append("\n// opsgate adds this rule to every policy set; keep it out of yours.\n"
                         + "".join(_commented(line) for line in text.splitlines()))
        else:
            parts.append(text if text.endswith("\n") else f"{text}\n")
    return "".join(parts)


def _commented(line: str) -> str:
    return f"{line}\n" if line.startswith("//") or not line else f"// {line}\n"


COMMANDS = (
    Command(
        name="policy",
        summary="check, print or explain the approval policy in Cedar (OPSGATE_POLICY)",
        description="The approval policy in Cedar: who may approve a plan at the gate, how many "
                    "must, and which plans approve themselves. `opsgate policy check` checks "
                    "the policies against the schema and the catalog; `opsgate policy default` "
                    "prints the shipped default to start from; `opsgate policy schema` prints "
                    "the Cedar schema; `opsgate policy explain --plan plan.json --as U0ALICE` "
                    "says who may approve a plan and why. " + _SETTINGS,
        add_arguments=policy_arguments,
        run=run_policy,
    ),
)
