"""The service catalog read from Backstage descriptors: one file of many documents or a folder,
entity references as plain names, the groups a person is in (every ancestor, cycles end), a
group's people, components found by Kubernetes object and by alert labels, a version that names
the content, and one line per problem naming the file, the entity and the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.catalog import (
    EMPTY_CATALOG,
    Catalog,
    CatalogError,
    CatalogProblem,
    catalog_of,
    load_catalog,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "catalog"
API = "backstage.io/v1alpha1"


def component(name: str, owner: str = "payments-oncall", namespace: str | None = None,
              **annotations: str) -> dict[str, Any]:
    if namespace:
        annotations["backstage.io/kubernetes-namespace"] = namespace
    return {"apiVersion": API, "kind": "Component",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"owner": owner, "lifecycle": "production"}}


def group(name: str, members: tuple[str, ...] = (), **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Group", "metadata": {"name": name},
            "spec": {"type": "team", "children": [], "members": list(members), **spec}}


def user(name: str, slack_id: str | None = None, *member_of: str) -> dict[str, Any]:
    annotations = {"slack.com/user-id": slack_id} if slack_id else {}
    return {"apiVersion": API, "kind": "User",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"memberOf": list(member_of)}}


def write(folder: Path, name: str, *documents: dict[str, Any]) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def catalog(tmp_path: Path, *documents: dict[str, Any]) -> Catalog:
    return load_catalog(write(tmp_path, "catalog-info.yaml", *documents))


def problems(path: Path) -> list[str]:
    with pytest.raises(CatalogError) as raised:
        load_catalog(path)
    return [str(problem) for problem in raised.value.problems]


# -- reading ----------------------------------------------------------------------------------


def test_the_example_folder_reads_every_file_in_order():
    example = load_catalog(EXAMPLE)
    assert list(example.components) == ["payments-api", "search-api"]
    assert list(example.groups) == ["incident-commanders", "payments-oncall", "search-team"]
    assert list(example.users) == ["alice", "bob", "carol", "dana"]
    assert [Path(source).name for source in example.sources] == \
        ["payments.yaml", "people.yaml", "search.yaml"]
    assert example.ignored == 1  # the System payments
    payments = example.component("payments-api")
    assert payments is not None
    assert (payments.owner, payments.lifecycle, payments.system) == \
        ("payments-oncall", "production", "payments")
    assert (payments.kubernetes_namespace, payments.kubernetes_id) == ("payments", "payments-api")
    assert payments.kubernetes_selector == (("app", "payments-api"),)
    assert [(link.title, link.type) for link in payments.links] == \
        [("Runbook", "runbook"), ("Dashboard", "dashboard")]
    assert payments.source.endswith("payments.yaml")


def test_one_file_of_many_documents_is_the_same_catalog_as_the_folder(tmp_path):
    documents = [document for file in sorted(EXAMPLE.glob("*.yaml"))
                 for document in yaml.safe_load_all(file.read_text())]
    one_file = write(tmp_path, "catalog-info.yaml", *documents)
    assert load_catalog(one_file).version == load_catalog(EXAMPLE).version
    assert load_catalog(one_file).sources == (str(one_file),)


def test_a_folder_is_read_recursively_yaml_and_yml_but_not_hidden_folders(tmp_path):
    write(tmp_path, "teams/payments/catalog-info.yml", group("payments-oncall", ("alice",)))
    write(tmp_path, "people.yaml", user("alice", "U0ALICE"))
    write(tmp_path, "services/payments.yaml", component("payments-api"))
    write(tmp_path, ".git/broken.yaml", {"not": "an entity"})
    (tmp_path / "README.md").write_text("not yaml")
    read = load_catalog(tmp_path)
    assert [Path(s).relative_to(tmp_path).as_posix() for s in read.sources] == \
        ["people.yaml", "services/payments.yaml", "teams/payments/catalog-info.yml"]
    assert set(read.components) == {"payments-api"}


def test_references_are_plain_names_whatever_their_form(tmp_path):
    read = catalog(tmp_path, component("a", "payments-oncall"),
                   component("b", "group:payments-oncall"),
                   component("c", "group:default/payments-oncall"),
                   group("payments-oncall", ("alice", "user:bob", "user:default/carol")),
                   user("alice"), user("bob"), user("carol"))
    assert {c.owner for c in read.components.values()} == {"payments-oncall"}
    assert read.groups["payments-oncall"].members == ("alice", "bob", "carol")


def test_other_kinds_and_other_tools_yaml_are_ignored_and_counted(tmp_path):
    read = catalog(tmp_path, group("g"),
                   {"apiVersion": API, "kind": "System", "metadata": {"name": "payments"}},
                   {"apiVersion": API, "kind": "Location", "spec": {"targets": ["x.yaml"]}},
                   {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}})
    assert (len(read.groups), read.ignored) == (1, 3)


def test_the_empty_catalog_is_the_catalog_of_no_path():
    assert catalog_of(None) is EMPTY_CATALOG is Catalog.EMPTY
    assert EMPTY_CATALOG.version == Catalog.of((), (), ()).version
    assert re.fullmatch(r"[0-9a-f]{64}", EMPTY_CATALOG.version)
    assert EMPTY_CATALOG.component("payments-api") is None
    assert EMPTY_CATALOG.groups_of("U0ALICE") == frozenset()


# -- the version -----------------------------------------------------------------------------


def test_the_version_is_stable_across_file_order_and_layout(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, "a.yaml", component("payments-api"), group("payments-oncall", ("alice", "bob")))
    write(first, "b.yaml", user("alice", "U0ALICE"), user("bob", "U0BOB"))
    write(second, "z.yaml", group("payments-oncall", ("bob", "alice")))
    write(second, "m.yaml", user("bob", "U0BOB"), user("alice", "U0ALICE"))
    (second / "c.yml").write_text(
        "# the same component, written by hand\n"
        "apiVersion: backstage.io/v1alpha1\nkind: Component\n"
        "metadata: {name: payments-api, annotations: {}}\n"
        "spec:\n    owner:   payments-oncall\n    lifecycle: production\n")
    assert load_catalog(first).version == load_catalog(second).version
    write(second, "z.yaml", group("payments-oncall", ("bob",)))
    assert load_catalog(first).version != load_catalog(second).version


# -- groups and people -----------------------------------------------------------------------


def test_groups_of_a_person_are_their_groups_and_every_ancestor(tmp_path):
    read = catalog(tmp_path,
                   group("engineering"),
                   group("payments", parent="engineering"),
                   group("payments-oncall", ("alice",), parent="payments"),
                   group("commanders", children=["payments-oncall"]),
                   group("search", ("bob",)),
                   user("alice", "U0ALICE"), user("bob", "U0BOB", "payments"),
                   user("carol", "U0CAROL"))
    assert read.groups_of("U0ALICE") == {"payments-oncall", "payments", "engineering",
                                         "commanders"}
    assert read.groups_of("U0BOB") == {"search", "payments", "engineering"}
    assert read.groups_of("U0CAROL") == frozenset()
    assert read.groups_of("U0NOBODY") == frozenset()
    assert read.parents("payments-oncall") == {"payments", "commanders"}
    assert read.parents("engineering") == frozenset()


def test_a_cycle_of_groups_ends(tmp_path):
    read = catalog(tmp_path, group("a", ("alice",), parent="b"), group("b", parent="c"),
                   group("c", children=["a"]), user("alice", "U0ALICE"))
    assert read.groups_of("U0ALICE") == {"a", "b", "c"}
    assert read.members("b") == {"U0ALICE"}


def test_members_of_a_group_include_its_descendants_with_a_slack_id(tmp_path):
    read = catalog(tmp_path,
                   group("payments", ("dana",)),
                   group("payments-oncall", ("alice",), parent="payments"),
                   group("payments-db", children=[]),
                   group("payments-platform", parent="payments", children=["payments-db"]),
                   user("alice", "U0ALICE"), user("bob", "U0BOB", "payments-db"),
                   user("dana", "W0DANA"), user("erin", None, "payments-oncall"))
    assert read.members("payments") == {"U0ALICE", "U0BOB", "W0DANA"}
    assert read.members("payments-oncall") == {"U0ALICE"}
    assert [u.name for u in read.users_in("payments-oncall")] == ["alice", "erin"]
    assert read.members("nobody") == frozenset()
    alice = read.user_by_slack_id("U0ALICE")
    assert alice is not None and alice.name == "alice"


# -- components by Kubernetes object and by alert -------------------------------------------


def kubernetes_catalog(tmp_path: Path) -> Catalog:
    return catalog(
        tmp_path,
        component("payments-api", namespace="payments",
                  **{"backstage.io/kubernetes-id": "payments"}),
        component("search-api", namespace="search"),
        component("ledger", **{"backstage.io/kubernetes-label-selector":
                               "app.kubernetes.io/name=ledger-worker,tier=batch"}),
        component("checkout", namespace="shop",
                  **{"backstage.io/kubernetes-label-selector": "app=checkout-web"}),
        component("cart", namespace="shop"),
        group("payments-oncall"))


def names(found: tuple[Any, ...]) -> list[str]:
    return [c.name for c in found]


def test_by_kubernetes_finds_a_deployment_by_id_name_or_app_label(tmp_path):
    read = kubernetes_catalog(tmp_path)
    assert names(read.by_kubernetes("payments", "payments")) == ["payments-api"]
    assert names(read.by_kubernetes("payments", "payments-api")) == []  # its id is "payments"
    assert names(read.by_kubernetes("default", "payments")) == []
    assert names(read.by_kubernetes("search", "search-api")) == ["search-api"]
    assert names(read.by_kubernetes("anywhere", "ledger-worker")) == ["ledger"]
    assert names(read.by_kubernetes("anywhere", "ledger")) == ["ledger"]
    assert names(read.by_kubernetes("shop", "checkout-web")) == ["checkout"]
    assert names(read.by_kubernetes(None, "search-api")) == ["search-api"]


def test_by_labels_reads_service_then_job_then_a_namespace_of_one(tmp_path):
    read = kubernetes_catalog(tmp_path)
    assert names(read.by_labels({"service": "payments-api"})) == ["payments-api"]
    assert names(read.by_labels({"service": "payments"})) == ["payments-api"]
    assert names(read.by_labels({"job": "search-api", "namespace": "search"})) == ["search-api"]
    assert names(read.by_labels({"job": "search-api", "namespace": "shop"})) == []
    assert names(read.by_labels({"job": "ledger", "namespace": "batch"})) == ["ledger"]
    assert names(read.by_labels({"service": "unknown", "job": "cart"})) == ["cart"]
    assert names(read.by_labels({"namespace": "payments", "alertname": "X"})) == ["payments-api"]
    assert names(read.by_labels({"namespace": "shop"})) == []  # two live there
    assert names(read.by_labels({"alertname": "HighErrorRate"})) == []


def test_resolve_splits_known_from_unknown_names_each_once(tmp_path):
    read = kubernetes_catalog(tmp_path)
    known, unknown = read.resolve(["cart", "nope", "search-api", "cart", "nope"])
    assert (names(known), unknown) == (["cart", "search-api"], ("nope",))


# -- problems --------------------------------------------------------------------------------


PROBLEMS = [
    ("owner missing", [component("payments-api", owner=""), group("payments-oncall")],
     "Component payments-api: spec.owner: missing; expected a group name such as "
     "payments-oncall"),
    ("owner not a group", [component("payments-api", owner="payments-oncal"),
                           group("payments-oncall")],
     "Component payments-api: spec.owner: payments-oncal is not a Group in the catalog; "
     "expected one of payments-oncall"),
    ("owner a user", [component("payments-api", owner="user:alice"), user("alice")],
     "Component payments-api: spec.owner: 'user:alice' names a user; expected a Group"),
    ("member not a user", [group("payments-oncall", ("alice", "zed")), user("alice")],
     "Group payments-oncall: spec.members: zed is not a User in the catalog"),
    ("bad slack id", [user("alice", "alice@example.com")],
     "User alice: metadata.annotations.slack.com/user-id: 'alice@example.com'; expected a "
     "Slack user id"),
    ("unknown parent", [group("payments-oncall", parent="payments")],
     "Group payments-oncall: spec.parent: payments is not a Group in the catalog"),
    ("unknown memberOf", [user("alice", "U0ALICE", "ghosts")],
     "User alice: spec.memberOf: ghosts is not a Group in the catalog"),
    ("bad selector", [component("payments-api", **{
        "backstage.io/kubernetes-label-selector": "tier in (web)"}), group("payments-oncall")],
     "Component payments-api: metadata.annotations.backstage.io/kubernetes-label-selector: "
     "'tier in (web)'; expected key=value labels"),
    ("lifecycle missing", [{**component("payments-api"), "spec": {"owner": "payments-oncall"}},
                           group("payments-oncall")],
     "Component payments-api: spec.lifecycle: missing; expected a lifecycle"),
    ("bad name", [group("Payments On-call")],
     "Group Payments On-call: metadata.name: 'Payments On-call' is not a name"),
    ("shared slack id", [user("alice", "U0ALICE"), user("alicia", "U0ALICE")],
     "User alicia: metadata.annotations.slack.com/user-id: U0ALICE is also alice's"),
    ("link without url", [{**component("payments-api"), "metadata": {
        "name": "payments-api", "links": [{"title": "Runbook"}]}}, group("payments-oncall")],
     "Component payments-api: metadata.links[0].url: missing"),
    ("kind in the wrong case", [{**group("g"), "kind": "group"}],
     "document 1: kind: 'group'; expected Component, Group, User"),
]


@pytest.mark.parametrize(("documents", "expected"), [(docs, line) for _, docs, line in PROBLEMS],
                         ids=[name for name, _, _ in PROBLEMS])
def test_every_problem_is_one_line_naming_file_entity_and_field(tmp_path, documents, expected):
    path = write(tmp_path, "catalog/payments.yaml", *documents)
    lines = problems(path)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {expected}"), lines[0]


def test_a_name_defined_in_two_files_names_both(tmp_path):
    write(tmp_path, "a.yaml", user("alice", "U0ALICE"))
    write(tmp_path, "b.yaml", user("alice", "U0ALICE2"))
    assert problems(tmp_path) == [
        f"{tmp_path / 'b.yaml'}: User alice: metadata.name: alice is defined in "
        f"{tmp_path / 'a.yaml'} too; expected each name once per kind"]


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "catalog-info.yaml"
    path.write_text("apiVersion: backstage.io/v1alpha1\nkind: User\nmetadata:\n"
                    "  name: alice\n  annotations: {slack.com/user-id: U0ALICE\n")
    (line,) = problems(path)
    assert re.match(rf"{re.escape(str(path))}: line \d+, column \d+: not valid YAML: ", line)


def test_a_missing_path_or_an_empty_folder_says_so(tmp_path):
    assert problems(tmp_path / "nowhere") == [
        f"{tmp_path / 'nowhere'}: no such file or folder; expected a Backstage "
        "catalog-info.yaml file or a folder of *.yaml files (Component, Group, User)"]
    (line,) = problems(tmp_path)
    assert line.startswith(f"{tmp_path}: no *.yaml or *.yml file in this folder")


def test_every_problem_of_every_file_is_listed_and_the_error_reads_as_the_first(tmp_path):
    write(tmp_path, "a.yaml", component("payments-api", owner="nobody"), {"kind": "User"})
    (tmp_path / "b.yaml").write_text("- [unclosed\n")
    with pytest.raises(CatalogError) as raised:
        load_catalog(tmp_path)
    found = raised.value.problems
    assert len(found) == 4, found  # the User's apiVersion and name, b.yaml's YAML, the owner
    assert str(raised.value) == f"{found[0]} (and 3 more)"
    assert all(isinstance(problem, CatalogProblem) for problem in found)


def test_a_problem_reads_as_one_line():
    problem = CatalogProblem("catalog/payments.yaml", "Component payments-api", "spec.owner",
                             "missing; expected a group name such as payments-oncall")
    assert str(problem) == ("catalog/payments.yaml: Component payments-api: spec.owner: "
                            "missing; expected a group name such as payments-oncall")
    assert str(CatalogProblem("x.yaml", None, None, "cannot be read")) == \
        "x.yaml: cannot be read"


@pytest.mark.parametrize(("name", "why"), [
    ("opsgate-approvers", "opsgate-approvers is reserved: its members are OPSGATE_APPROVERS "
                          "alone; expected another name"),
    ("opsgate:anyone", "'opsgate:anyone' is reserved: opsgate: names are opsgate's own; "
                       "expected another name"),
    ("S0614TZR7", "S0614TZR7 is reserved: it is shaped like a Slack id (S…, U…, W…); expected "
                  "a lowercase name, with a Slack user group linked by slack.com/usergroup-id"),
])
def test_a_reserved_group_name_is_refused_in_one_line_naming_the_file(tmp_path, name, why):
    """Issue 40: a catalog Group named opsgate-approvers (or like a Slack user group) would
    make its members approvers whatever OPSGATE_APPROVERS says."""
    path = write(tmp_path, "evil.yaml", group(name, ("eve",)), user("eve", "U0EVE"))
    assert problems(path) == [f"{path}: Group {name}: metadata.name: {why}"]


def test_a_user_named_like_a_slack_id_is_refused(tmp_path):
    path = write(tmp_path, "evil.yaml", user("U0ALICE", "U0EVE"))
    assert problems(path) == [
        f"{path}: User U0ALICE: metadata.name: U0ALICE is reserved: it is shaped like a Slack "
        "id (S…, U…, W…); expected a lowercase name, with a Slack user group linked by "
        "slack.com/usergroup-id"]


def test_the_remedy_annotations_are_read_and_are_part_of_the_version(
        tmp_path):
    owner = group("payments-oncall")
    plain = catalog(tmp_path / "a", component("ledger"), owner)
    annotated = catalog(tmp_path / "b", component(
        "ledger", **{"opsgate.dev/max-replicas": "12", "opsgate.dev/regions": "fra1,ams3",
                     "opsgate.dev/flags": "ledger-flags", "opsgate.dev/other": "x"}), owner)
    ledger = annotated.component("ledger")
    assert ledger is not None and ledger.remedy == (
        ("max-replicas", "12"), ("regions", "fra1,ams3"), ("flags", "ledger-flags"))
    assert ledger.remedy_annotation("regions") == "fra1,ams3"
    assert ledger.remedy_annotation("route") is None
    assert plain.component("ledger").remedy == ()  # type: ignore[union-attr]
    assert plain.version != annotated.version
    again = catalog(tmp_path / "c", component("ledger"), owner)
    assert again.version == plain.version
