"""Who is in which group comes from the directory the operator names (issue 40): a User's
memberOf, a Group's parent or children, or a group's Slack user group declared outside the
directory's files make nobody a member; ``OPSGATE_DIRECTORY`` unset, no group has members; a
catalog Group named opsgate-approvers never makes approvers, whatever file it comes from."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from core.bootstrap import policy_from_settings
from core.catalog import Catalog, Component, Group, User
from core.catalog.directory import Directory, as_directory_says
from core.domain.policy import ApprovalPolicy
from core.policy.rules import APPROVERS_GROUP
from core.settings import Settings, read_settings
from core.settings_errors import InvalidSettings

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
EVE = "U0EVE"
ROLLOUT = {
    "title": "Roll payments-api back", "risk_score": 0.3,
    "steps": [{"action": "k8s.rollout", "params": {
        "operation": "undo", "namespace": "payments", "deployment": "payments-api"},
        "timeout_s": 300, "retry": 0}],
    "rollback": {"action": "noop"},
    "verify": {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60},
}
EVE_USER = """\
apiVersion: backstage.io/v1alpha1
kind: User
metadata: {name: eve, annotations: {slack.com/user-id: U0EVE}}
spec: {memberOf: %s}
"""
GROUP = """\
---
apiVersion: backstage.io/v1alpha1
kind: Group
metadata: {name: %s}
spec: {type: team, members: [eve], %s}
"""


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    """The example catalog with its people and groups moved into an ``org`` folder, the
    directory; component files stay outside it."""
    folder = tmp_path / "catalog"
    shutil.copytree(EXAMPLES / "catalog", folder)
    (folder / "org").mkdir()
    (folder / "people.yaml").rename(folder / "org" / "people.yaml")
    return folder


def policy(catalog: Path, *directory: str, **settings: Any) -> ApprovalPolicy:
    return policy_from_settings(Settings(catalog=catalog, policy=EXAMPLES / "policies",
                                         directory=list(directory), approvers=[], **settings))


def may(policy: ApprovalPolicy, person: str) -> bool:
    return policy.at((), None).refusal(person, "U0ERIN", ROLLOUT) is None


@pytest.mark.parametrize(("name", "text"), [
    ("member-of.yaml", EVE_USER % "[payments-oncall]"),
    ("parent.yaml", EVE_USER % "[]" + GROUP % ("eve-friends", "parent: payments-oncall")),
])
def test_a_claim_outside_the_directory_grants_nothing(catalog, name, text):
    (catalog / name).write_text(text)
    assert not may(policy(catalog, "catalog:org"), EVE)
    assert may(policy(catalog, "catalog"), EVE)  # the whole catalog named: its claims count


def test_the_directory_s_own_memberships_count(catalog):
    assert may(policy(catalog, "catalog:org"), "U0ALICE")  # memberOf in org/people.yaml
    (catalog / "org" / "eve.yaml").write_text(EVE_USER % "[payments-oncall]")
    assert may(policy(catalog, "catalog:org/eve.yaml", "catalog:org/people.yaml"), EVE)


def test_an_unset_directory_makes_no_group_member_only_the_approver_list(catalog):
    unset = policy(catalog)
    assert not may(unset, "U0ALICE")
    assert "only payments-oncall may approve" in str(
        unset.at((), None).refusal("U0ALICE", "U0ERIN", ROLLOUT))


def test_a_slack_user_group_counts_only_with_slack_in_the_directory(catalog):
    members = {"S0SRE": ["U0EVE"]}
    (catalog / "org" / "oncall.yaml").write_text(
        "apiVersion: backstage.io/v1alpha1\nkind: Group\nmetadata:\n  name: sre\n"
        "  annotations: {slack.com/usergroup-id: S0SRE}\nspec: {parent: payments-oncall}\n")
    for directory, expected in ((("catalog",), False), (("catalog", "slack"), True)):
        judged = policy_from_settings(
            Settings(catalog=catalog, policy=EXAMPLES / "policies", approvers=[],
                     directory=list(directory)),
            members=lambda group: members.get(group, ()))
        assert may(judged, EVE) is expected, directory


def test_the_approver_list_s_slack_groups_count_without_a_directory():
    judged = policy_from_settings(Settings(approvers=["S0LEADS"]),
                                  members=lambda group: ["U0LEAD"] if group == "S0LEADS" else [])
    assert judged.at((), None).refusal("U0LEAD", "U0ERIN", ROLLOUT) is None


def test_a_catalog_group_named_like_the_approvers_group_makes_nobody_an_approver():
    """Even a catalog built without the loader's refusal (issue 40)."""
    catalog = Catalog.of(
        [Component("payments-api", "payments-oncall", "production", None, None, None,
                   "payments", (), (), "c.yaml")],
        [Group(APPROVERS_GROUP, ("eve",), None, (), None, None, "evil.yaml"),
         Group("payments-oncall", (), None, (), None, None, "c.yaml")],
        [User("eve", EVE, (), None, "evil.yaml")])
    judged = ApprovalPolicy(approvers=frozenset({"U0ALICE"}), catalog=lambda: catalog)
    assert judged.at((), None).refusal(EVE, "U0ERIN", ROLLOUT) == (
        "U0EVE is not an approver (U0ALICE may approve)")


@pytest.mark.parametrize(("entries", "expected"), [
    ([], Directory()),
    (["slack"], Directory(slack=True)),
    (["catalog"], Directory(catalog=(".",))),
    (["slack", "catalog:org/", "catalog:org"], Directory(slack=True, catalog=("org",))),
])
def test_the_directory_s_forms(entries, expected):
    assert Directory.parse(entries) == expected


@pytest.mark.parametrize("value", ["ldap", "catalog:../elsewhere", "catalog:/etc/org",
                                   "catalog:"])
def test_a_directory_that_is_not_one_of_the_forms_is_one_line(value, monkeypatch):
    monkeypatch.setenv("OPSGATE_DIRECTORY", value)
    with pytest.raises(InvalidSettings) as refused:
        read_settings(Settings)
    [line] = refused.value.problems
    assert line.startswith(f"OPSGATE_DIRECTORY={value}: ") and "expected slack, catalog" in line


def test_covers_reads_paths_inside_the_catalog(tmp_path):
    (tmp_path / "org").mkdir()
    directory = Directory(catalog=("org",))
    assert directory.covers(str(tmp_path / "org" / "people.yaml"), tmp_path)
    assert not directory.covers(str(tmp_path / "organisation.yaml"), tmp_path)
    assert not directory.covers(str(tmp_path / "team" / "org" / "x.yaml"), tmp_path)
    catalog = Catalog.of([], [Group("g", (), None, (), "S0G", None, str(tmp_path / "x.yaml"))],
                         [])
    assert as_directory_says(catalog, directory, tmp_path).groups["g"].slack_group is None


def test_readiness_names_a_directory_path_that_is_not_in_the_catalog(catalog, sqlite_engine):
    from core.ops.readiness import check_directory
    from tests.support.apps import make_app

    app = make_app(sqlite_engine, catalog=catalog, directory=["slack", "catalog:orgg"])
    try:
        assert check_directory(app) == {
            "ok": True, "membership": "Slack user groups and the catalog's orgg "
                                      "(OPSGATE_DIRECTORY)",
            "warning": "OPSGATE_DIRECTORY names catalog:orgg, which is not in OPSGATE_CATALOG: "
                       "it makes nobody a member"}
    finally:
        app.close()
