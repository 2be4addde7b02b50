"""Who may approve what, audited (issue 40): after a catalog edit, ``opsgate policy changes``
lists who gained and who lost approval rights, when, and after which files changed; a change is
recorded once however many processes look (SQLite and PostgreSQL)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from core.db.tables import approval_rights_change
from core.ops.rights import RightsWatch, record
from tests.support.apps import make_app
from tests.support.processes import clean_env, command

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
EVE = """\
apiVersion: backstage.io/v1alpha1
kind: User
metadata: {name: eve, annotations: {slack.com/user-id: U0EVE}}
spec: {profile: {displayName: Eve Example}, memberOf: [payments-oncall]}
"""


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    folder = tmp_path / "catalog"
    shutil.copytree(EXAMPLES / "catalog", folder)
    return folder


def changes(engine: Engine, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    url = engine.url.render_as_string(hide_password=False)
    return subprocess.run(command("policy", "changes", *args), cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False,
                          env=clean_env(OPSGATE_DATABASE_URL=url))


def recorded(app: Any, within_s: float = 15.0) -> bool:
    """Record until the running app's catalog reload shows (it looks every 2 s)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if record(app):
            return True
        time.sleep(0.2)
    return False


def test_a_catalog_edit_lists_who_gained_and_lost_approval(engine, catalog, tmp_path):
    app = make_app(engine, catalog=catalog, policy=EXAMPLES / "policies",
                   directory=["catalog"], approvers=[])
    try:
        assert record(app)  # the first record: everyone approving now
        assert not record(app)  # nothing changed
        payments, people = catalog / "payments.yaml", catalog / "people.yaml"
        payments.write_text(payments.read_text().replace("members: [alice, bob]",
                                                         "members: [alice]"))
        people.write_text(people.read_text().replace(
            "    displayName: Bob Example\n  memberOf: [payments-oncall]",
            "    displayName: Bob Example\n  memberOf: [search-team]"))
        (catalog / "eve.yaml").write_text(EVE)
        assert recorded(app)
    finally:
        app.close()

    listed = changes(engine, tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, after {catalog}/eve\.yaml, {catalog}/"
        rf"payments\.yaml, {catalog}/people\.yaml changed \(policy version [0-9a-f]{{12}}\):",
        lines[0]), lines[0]
    assert lines[1:4] == ["  Eve Example (U0EVE) gained approval as payments-oncall",
                          "  Bob Example (U0BOB) gained approval as search-team",
                          "  Bob Example (U0BOB) lost approval as payments-oncall"]
    assert lines[4].endswith("first record (policy version "
                             f"{lines[4].split('policy version ')[1]}")
    assert "  Alice Example (U0ALICE) gained approval as payments-oncall" in lines[5:]
    assert "  Dana Example (U0DANA) gained approval as incident-commanders" in lines[5:]


def test_many_processes_record_a_change_once(engine, catalog):
    apps = [make_app(engine, catalog=catalog, policy=EXAMPLES / "policies",
                     directory=["catalog"], approvers=[]) for _ in range(3)]
    try:
        watches = [RightsWatch(app) for app in apps]
        for watch in watches:
            watch.look()
        with engine.connect() as conn:
            count = conn.execute(select(func.count()).select_from(approval_rights_change))
            assert count.scalar_one() == 1
    finally:
        for app in apps:
            app.close()


def test_nothing_recorded_yet_says_so(sqlite_engine, tmp_path):
    listed = changes(sqlite_engine, tmp_path)
    assert (listed.returncode, listed.stdout) == (
        0, "no change of who may approve what is recorded yet (`opsgate serve` records them)\n")
