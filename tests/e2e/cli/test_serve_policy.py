"""``opsgate serve`` refuses to start on an approval policy or a catalog it cannot use, saying
why in one line (exit 2), before it serves anything (issue 27)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.cli.test_cli import opsgate
from tests.support.peers import free_port

EXAMPLES = Path(__file__).parents[3] / "docs" / "examples"


def serve(tmp_path: Path, **env: str):
    return opsgate(tmp_path, "serve", "--port", str(free_port()), "--database-url",
                   f"sqlite:///{tmp_path / 'opsgate.db'}", **env)


def test_serve_refuses_a_policy_that_fails_the_schema(tmp_path):
    policy = tmp_path / "payments.cedar"
    policy.write_text('@id("payments-two")\npermit (principal, action == Action::"approve", '
                      "resource) when { resource.riskk.greaterThan(decimal(\"0.7\")) };\n")
    refused = serve(tmp_path, OPSGATE_POLICY=str(policy))
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line == (f"opsgate: error: {policy}: policy payments-two: attribute `riskk` on "
                    "entity type `Plan` not found")


def test_serve_refuses_a_policy_naming_a_group_the_catalog_lacks(tmp_path):
    policy = tmp_path / "owners.cedar"
    policy.write_text('@id("sre")\npermit (principal in Group::"sre-team", action, resource);\n')
    refused = serve(tmp_path, OPSGATE_POLICY=str(policy),
                    OPSGATE_CATALOG=str(EXAMPLES / "catalog"))
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert 'Group::"sre-team" is not in the catalog (OPSGATE_CATALOG)' in line


def test_serve_refuses_a_catalog_with_problems(tmp_path):
    catalog = tmp_path / "catalog-info.yaml"
    catalog.write_text("apiVersion: backstage.io/v1alpha1\nkind: Component\n"
                       "metadata: {name: payments-api}\nspec: {lifecycle: production}\n")
    refused = serve(tmp_path, OPSGATE_CATALOG=str(catalog))
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "Component payments-api: spec.owner: missing" in line
