"""``opsgate serve`` refuses to start on an approval policy or a catalog it cannot use, saying
why in one line (exit 2), before it serves anything (issue 27); once serving, it records every
change of who may approve what, which ``opsgate policy changes`` lists (issue 40)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from tests.e2e.cli.test_cli import opsgate
from tests.support.peers import free_port
from tests.support.processes import Process, clean_env, command

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


def test_serve_records_who_gained_and_lost_approval_after_a_catalog_edit(tmp_path):
    """Issue 40: a running server audits every change of who may approve what; `opsgate
    policy changes` lists it. Without OPSGATE_DIRECTORY it says at start that only
    OPSGATE_APPROVERS may approve."""
    catalog = tmp_path / "catalog"
    shutil.copytree(EXAMPLES / "catalog", catalog)
    database = f"sqlite:///{tmp_path / 'opsgate.db'}"
    env = clean_env(OPSGATE_CATALOG=str(catalog), OPSGATE_POLICY=str(EXAMPLES / "policies"),
                    OPSGATE_DIRECTORY="catalog", OPSGATE_DATABASE_URL=database)
    server = Process("serve", ("serve", "--port", str(free_port())), env,
                     tmp_path / "serve.log").start()
    try:
        server.wait_for_output("opsgate API on")
        until_listed(tmp_path, env, "first record")
        people = catalog / "people.yaml"
        people.write_text(people.read_text().replace(
            "    displayName: Dana Example\n  memberOf: [incident-commanders]",
            "    displayName: Dana Example\n  memberOf: [payments-oncall]"))
        listed = until_listed(tmp_path, env, "people.yaml changed")
    finally:
        server.terminate()
    assert listed[1] == "  Dana Example (U0DANA) gained approval as payments-oncall"
    assert "first record" in listed[2]  # incident-commanders' members: [dana] still holds

    unset = Process("unset", ("serve", "--port", str(free_port())),
                    {k: v for k, v in env.items() if k != "OPSGATE_DIRECTORY"},
                    tmp_path / "unset.log").start()
    try:
        unset.wait_for_output("group membership is read from nowhere (OPSGATE_DIRECTORY is "
                              "unset): no group has members, only OPSGATE_APPROVERS may approve")
    finally:
        unset.terminate()


def until_listed(cwd: Path, env: dict[str, str], text: str) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        listed = subprocess.run(command("policy", "changes"), cwd=cwd, env=env, text=True,
                                capture_output=True, timeout=60, check=False)
        assert listed.returncode == 0, listed.stderr
        if text in listed.stdout:
            return listed.stdout.splitlines()
        assert time.monotonic() < deadline, listed.stdout
        time.sleep(0.5)
