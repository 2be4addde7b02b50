"""docs/deploy.md's "Backups", run as written on the local PostgreSQL: cases made through the
product (``opsgate demo --walk``: a case opened over REST, planned, approved, run through the
gateway, verified and CLOSED, its thread posted to a Slack of the test's own) on a fresh
database; the doc's ``pg_dump``, then its restore into a new database (``pg_restore``,
``opsgate migrate``, ``opsgate reconcile``), which finds reconcile clean and every case, timeline
row, ledger row, outbox and inbox row where it was.

Bounded: two walks of one case each (a few seconds each), one dump and restore of a small
database."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.deploy_doc import contents, fresh_database, run_blocks
from tests.support.processes import clean_env, command
from tests.support.slack import CHANNEL, fake_slack

pytestmark = [pytest.mark.postgres]

DOC_URL = "postgresql://opsgate@postgres.example.com:5432/opsgate"


def opsgate(cwd, *args: str, **env: str) -> str:
    result = subprocess.run(command(*args), cwd=cwd, env=clean_env(**env), capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, f"opsgate {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def test_the_documented_backup_restores_every_case_and_reconciles_clean(tmp_path,
                                                                        postgres_admin):
    with fresh_database(postgres_admin, "source") as source, \
            fresh_database(postgres_admin, "restored") as restored, fake_slack() as slack:
        opsgate(tmp_path, "migrate", OPSGATE_DATABASE_URL=source.url)
        for _ in range(2):
            walked = opsgate(tmp_path, "demo", "--walk", OPSGATE_DATABASE_URL=source.url,
                             SLACK_BOT_TOKEN="xoxb-test", OPSGATE_SLACK_API_URL=slack.api_url,
                             OPSGATE_INCIDENT_CHANNEL=CHANNEL)
            assert " CLOSED in " in walked, walked
        assert "reconcile: clean" in opsgate(tmp_path, "reconcile",
                                             OPSGATE_DATABASE_URL=source.url)
        before = contents(source)
        assert len(before["ops_case"]) == 2 and len(before["tool_call_ledger"]) >= 2
        assert slack.posts(), "the walks posted their threads"

        # The doc creates the restored database itself: the test's own name for it is dropped
        # and created again by the doc's psql line.
        with postgres_admin.connect() as conn:
            conn.exec_driver_sql(f'drop database "{restored.name}"')
        said = run_blocks("Backups", tmp_path, replaced=[
            (f"{DOC_URL}_restored", restored.url),
            ("create database opsgate_restored", f"create database {restored.name}"),
            (DOC_URL, source.url)])
        assert "already at head" in said, said
        assert "reconcile: clean" in said, said
        after = contents(restored)
    assert after == before
    assert {case["status"] for case in after["ops_case"]} == {"CLOSED"}
