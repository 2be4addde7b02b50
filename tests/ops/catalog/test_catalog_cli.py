"""``opsgate catalog check|list|show`` as an operator runs it, the real console script on real
files: the catalog's size and version, its components in columns, one component in sentences,
and every mistake as lines on stderr with exit 2, never a traceback."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.processes import clean_env, command

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "catalog"


def opsgate(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command("catalog", *args), cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=60, check=False)


def broken_catalog(folder: Path) -> Path:
    folder.mkdir()
    (folder / "payments.yaml").write_text(
        "apiVersion: backstage.io/v1alpha1\nkind: Component\n"
        "metadata: {name: payments-api}\nspec: {owner: payments-oncal, lifecycle: production}\n"
        "---\napiVersion: backstage.io/v1alpha1\nkind: Group\nmetadata: {name: payments-oncall}\n"
        "spec: {type: team, children: [], members: [alice]}\n")
    (folder / "people.yaml").write_text(
        "apiVersion: backstage.io/v1alpha1\nkind: User\nmetadata:\n  name: alice\n"
        "  annotations: {slack.com/user-id: alice}\n")
    (folder / "search.yaml").write_text("kind: Component\nmetadata: [\n")
    return folder


def test_check_says_how_much_the_catalog_holds_and_its_version(tmp_path):
    result = opsgate(tmp_path, "check", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        rf"catalog {re.escape(str(EXAMPLE))}: 2 components, 3 groups, 4 users "
        r"\(version [0-9a-f]{12}\); 1 entity of another kind \(System, API, Resource…\) "
        r"ignored\n", result.stdout), result.stdout
    assert result.stderr == ""


def test_check_reads_opsgate_catalog_when_no_path_is_given(tmp_path):
    named = opsgate(tmp_path, "check", str(EXAMPLE))
    configured = opsgate(tmp_path, "check", OPSGATE_CATALOG=str(EXAMPLE))
    assert configured.returncode == 0, configured.stderr
    assert configured.stdout == named.stdout


def test_check_without_a_catalog_says_opsgate_catalog_is_unset(tmp_path):
    result = opsgate(tmp_path, "check")
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "OPSGATE_CATALOG is unset" in line and "catalog-info.yaml" in line


def test_check_names_every_problem_one_line_each(tmp_path):
    broken_catalog(tmp_path / "catalog")
    result = opsgate(tmp_path, "check", "catalog")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "catalog/people.yaml: User alice: metadata.annotations.slack.com/user-id: 'alice'; "
        "expected a Slack user id such as U0ALICE (U or W, then capitals and digits)",
        "catalog/search.yaml: line 3, column 1: not valid YAML: expected the node content, "
        "but found '<stream end>'",
        "catalog/payments.yaml: Component payments-api: spec.owner: payments-oncal is not a "
        "Group in the catalog; expected one of payments-oncall",
    ]


def test_check_of_a_missing_path_says_so(tmp_path):
    result = opsgate(tmp_path, "check", "nowhere")
    assert result.returncode == 2
    assert result.stderr.startswith("nowhere: no such file or folder; expected a Backstage ")


def test_list_shows_one_aligned_line_per_component(tmp_path):
    result = opsgate(tmp_path, "list", "--path", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "NAME          OWNER            LIFECYCLE   SYSTEM    KUBERNETES",
        "payments-api  payments-oncall  production  payments  payments/payments-api",
        "search-api    search-team      production  -         search/search-api",
    ]


def test_show_tells_owners_kubernetes_and_links_in_sentences(tmp_path):
    result = opsgate(tmp_path, "show", "payments-api", OPSGATE_CATALOG=str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "payments-api (production, system payments) is owned by payments-oncall: "
        "Alice Example (U0ALICE), Bob Example (U0BOB).",
        "Takes card payments for checkout.",
        "Kubernetes: deployment payments-api in namespace payments (selector app=payments-api).",
        "Links: Runbook https://runbooks.example.com/payments-api, "
        "Dashboard https://grafana.example.com/d/payments-api",
    ]


def test_show_of_an_unknown_name_lists_the_known_ones(tmp_path):
    result = opsgate(tmp_path, "show", "payments", "--path", str(EXAMPLE))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "opsgate: error: no component named payments in the catalog "
        "(known: payments-api, search-api)"]


def test_list_and_show_of_a_bad_catalog_print_its_problems(tmp_path):
    broken_catalog(tmp_path / "catalog")
    for args in (("list", "--path", "catalog"), ("show", "payments-api", "--path", "catalog")):
        result = opsgate(tmp_path, *args)
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 3
        assert "Traceback" not in result.stderr
