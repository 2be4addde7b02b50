"""The ``opsgate`` command as an operator runs it: real subprocesses, real files, real HTTP.

Each test runs in its own temporary directory, so the default ``sqlite:///./opsgate.db`` lands
there, and with no ``OPSGATE_*`` variable inherited from the caller.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, text

from core.migrate import head_revision
from tests.support.peers import free_port
from tests.support.processes import clean_env, command
from tests.support.servers import POSTGRES_URL

STARTUP_DEADLINE_S = 90.0


def opsgate(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), cwd=cwd, env=clean_env(**env), capture_output=True,
                          text=True, timeout=120, check=False)


def sqlite_tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("select name from sqlite_master where type='table'")}


# -- help -----------------------------------------------------------------------------------


def test_help_lists_every_subcommand(tmp_path):
    result = opsgate(tmp_path, "--help")
    assert result.returncode == 0
    for name in ("migrate", "serve", "demo"):
        assert name in result.stdout


def test_serve_help_explains_its_options(tmp_path):
    result = opsgate(tmp_path, "serve", "--help")
    assert result.returncode == 0
    for words in ("--host", "--port", "--database-url", "OPSGATE_API_TOKEN", "opsgate migrate"):
        assert words in result.stdout


def test_no_subcommand_is_a_usage_error(tmp_path):
    result = opsgate(tmp_path)
    assert result.returncode == 2
    assert "usage: opsgate" in result.stderr


# -- migrate --------------------------------------------------------------------------------


def test_migrate_upgrades_the_default_database_then_finds_it_at_head(tmp_path):
    first = opsgate(tmp_path, "migrate")
    assert first.returncode == 0, first.stderr
    assert f"upgraded from an empty schema to head ({head_revision()})" in first.stdout
    assert {"ops_case", "case_timeline", "outbox", "idempotency"} <= sqlite_tables(
        tmp_path / "opsgate.db")
    again = opsgate(tmp_path, "migrate")
    assert again.returncode == 0, again.stderr
    assert f"already at head ({head_revision()})" in again.stdout


def test_migrate_reads_the_database_url_from_the_environment(tmp_path):
    result = opsgate(tmp_path, "migrate", OPSGATE_DATABASE_URL=f"sqlite:///{tmp_path}/env.db")
    assert result.returncode == 0, result.stderr
    assert "ops_case" in sqlite_tables(tmp_path / "env.db")
    assert not (tmp_path / "opsgate.db").exists()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://postgres@127.0.0.1:1/test", "opsgate: error: database error:"),
        ("sqlite:////nonexistent-dir/sub/opsgate.db", "opsgate: error: database error:"),
    ],
)
def test_an_expected_failure_is_one_line_and_a_non_zero_exit(tmp_path, url, says):
    result = opsgate(tmp_path, "migrate", "--database-url", url)
    assert result.returncode == 1
    assert result.stderr.startswith(says), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


# -- settings mistakes: one line each, exit 2, no traceback -----------------------------------

SETTINGS_MISTAKES = [
    # (variable, value, the line after "opsgate: error: ")
    ("OPSGATE_ANALYSIS_BEFORE_S", "120", "OPSGATE_ANALYSIS_BEFORE_S=120: out of range; expected "
     "a whole number of seconds from 300 to 604800"),
    ("OPSGATE_SLACK_WORKERS", "many", "OPSGATE_SLACK_WORKERS=many: not a whole number; "
     "expected a whole number from 1 to 512"),
    ("OPSGATE_TWO_PERSON_RISK", "1.5", "OPSGATE_TWO_PERSON_RISK=1.5: out of range; expected a "
     "number from 0 to 1"),
    ("OPSGATE_TWO_PERSON_RISK", "NaN", "OPSGATE_TWO_PERSON_RISK=NaN: not a finite number; "
     "expected a number from 0 to 1"),
    ("OPSGATE_AUTO_APPROVE", "always", "OPSGATE_AUTO_APPROVE=always: not one of the choices; "
     "expected one of off, noop_only, low_risk"),
    ("OPSGATE_APPROVERS", '["U0APP1",', 'OPSGATE_APPROVERS=["U0APP1",: not a JSON list ('),
    ("OPSGATE_STATIC_METRICS", "error_rate=0.1", "OPSGATE_STATIC_METRICS=error_rate=0.1: not "
     "JSON ("),
    ("OPSGATE_PROMETHEUS_URL", "prometheus:9090", "OPSGATE_PROMETHEUS_URL=prometheus:9090: not "
     "an absolute http:// or https:// URL; expected an http:// or https:// URL (or unset)"),
    ("OPSGATE_PROMETHEUS_URL", "ftp://reader:s3cret@prom/", "OPSGATE_PROMETHEUS_URL=ftp://prom/: "
     "not an absolute http:// or https:// URL"),
    ("OPSGATE_APPROVERS", "alice,U0BOB,bob", "OPSGATE_APPROVERS=alice,U0BOB,bob: 'alice', 'bob' "
     "are no Slack ids; expected Slack user ids (U…, W…) or user group ids (S…), separated by "
     "commas (U012AB3CD,S0614TZR7)"),
    ("OPSGATE_SCRIPT_ENV_ALLOW", "DRAIN_SECONDS,LD_PRELOAD", "OPSGATE_SCRIPT_ENV_ALLOW="
     "DRAIN_SECONDS,LD_PRELOAD: LD_PRELOAD would let a plan change which code a script runs; "
     "expected variable names"),
    # the Slack channel id (the bot's layer): a channel's name is the usual slip
    ("OPSGATE_INCIDENT_CHANNEL", "#incident", "OPSGATE_INCIDENT_CHANNEL=#incident: a channel's "
     "name, not its id; expected a Slack channel id, C… or G… (C012AB3CD: the bottom of the "
     "channel's details in Slack) (or unset)"),
    ("OPSGATE_INCIDENT_CHANNEL", "U0LEAD", "OPSGATE_INCIDENT_CHANNEL=U0LEAD: not a Slack "
     "channel id; expected a Slack channel id, C… or G…"),
]


@pytest.mark.parametrize("subcommand", ["migrate", "serve"])
@pytest.mark.parametrize(("variable", "value", "line"), SETTINGS_MISTAKES)
def test_a_settings_mistake_is_one_line_naming_the_variable_and_the_form(
        tmp_path, monkeypatch, capsys, subcommand, variable, value, line):
    from core.cli import main

    monkeypatch.chdir(tmp_path)  # no .env of the caller's
    for name in [name for name in os.environ if name.startswith("OPSGATE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(variable, value)
    assert main([subcommand]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opsgate: error: {line}"), err
    assert len(err.strip().splitlines()) == 1 and "expected" in err
    assert "s3cret" not in err
    assert not (tmp_path / "opsgate.db").exists(), "nothing may start on a bad setting"


def test_every_mistake_gets_its_own_line(tmp_path, monkeypatch, capsys):
    from core.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPSGATE_ANALYSIS_BEFORE_S", "120")
    monkeypatch.setenv("OPSGATE_AUTO_APPROVE", "sometimes")
    assert main(["migrate"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert sorted(line.split("=", 1)[0] for line in lines) == [
        "opsgate: error: OPSGATE_ANALYSIS_BEFORE_S", "opsgate: error: OPSGATE_AUTO_APPROVE"]


@pytest.mark.parametrize("args", [("migrate",), ("serve", "--port", "1")])
def test_the_red_teams_settings_stop_the_real_command_in_one_line(tmp_path, args):
    result = opsgate(tmp_path, *args, OPSGATE_ANALYSIS_BEFORE_S="120")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("opsgate: error: OPSGATE_ANALYSIS_BEFORE_S=120: out of "
                                     "range; expected a whole number of seconds from 300 to "
                                     "604800")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_comma_separated_approver_list_is_read_as_a_list(tmp_path):
    result = opsgate(tmp_path, "migrate", OPSGATE_APPROVERS="U0APP1,U0APP2",
                     OPSGATE_SCRIPT_ENV_ALLOW="DRAIN_SECONDS,SERVICE_*")
    assert result.returncode == 0, result.stderr
    assert "opsgate: error" not in result.stderr


@pytest.mark.parametrize(("text", "names"), [
    ("U0APP1,U0APP2", ["U0APP1", "U0APP2"]), (" U0APP1 , U0APP2, ", ["U0APP1", "U0APP2"]),
    ('["U0APP1", "S0GROUP"]', ["U0APP1", "S0GROUP"]), ("U0APP1", ["U0APP1"]), ("", []),
])
def test_list_settings_take_commas_or_json(monkeypatch, text, names):
    from core.settings import load_settings

    monkeypatch.setenv("OPSGATE_APPROVERS", text)
    monkeypatch.setenv("OPSGATE_HTTP_ALLOWLIST", text)
    settings = load_settings(_env_file=None)
    assert settings.approvers == names and settings.http_allowlist == names


def test_an_unusable_database_url_is_a_settings_mistake_shown_without_its_password(tmp_path):
    result = opsgate(tmp_path, "migrate", "--database-url", "nosuchdb://admin:s3cret@db/x")
    assert result.returncode == 2
    assert result.stderr.startswith("opsgate: error: invalid database URL 'nosuchdb://db/x': ")
    assert "expected a SQLAlchemy URL" in result.stderr and "s3cret" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# -- a setting nobody reads ----------------------------------------------------------------

COMMAND_LINES = {
    "catalog": ["catalog", "list"], "consume": ["consume"], "demo": ["demo"], "eval": ["eval"],
    "export": ["export", str(uuid.UUID(int=1))], "health": ["health", "relay"],
    "library": ["library", "status"], "mcp": ["mcp"], "migrate": ["migrate"],
    "outbox": ["outbox", "dead"], "policy": ["policy", "default"], "reconcile": ["reconcile"],
    "relay": ["relay"], "serve": ["serve"], "token": ["token", "list"], "trace": ["trace", "x"]}
"""A command line of each command that parses: the refusal comes before any command runs."""
APROVERS = ("opsgate: error: OPSGATE_APROVERS: no such setting; did you mean "
            "OPSGATE_APPROVERS?")


def test_every_command_refuses_a_setting_nobody_reads_and_names_the_closest(
        tmp_path, monkeypatch, capsys):
    from core.cli import main, registered_commands

    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("OPSGATE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OPSGATE_APROVERS", "U0LEAD")
    assert sorted(command.name for command in registered_commands()) == sorted(COMMAND_LINES)
    for name, argv in COMMAND_LINES.items():
        assert main(argv) == 2, name
        assert capsys.readouterr().err == APROVERS + "\n", name
    assert list(tmp_path.iterdir()) == [], "nothing may start on a setting nobody reads"


def test_serve_with_a_misspelt_setting_exits_2_in_one_line(tmp_path):
    result = opsgate(tmp_path, "serve", OPSGATE_APROVERS="x", OPSGATE_PROMETHEUS_ULR="http://p")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        APROVERS, "opsgate: error: OPSGATE_PROMETHEUS_ULR: no such setting; did you mean "
                  "OPSGATE_PROMETHEUS_URL?"]
    assert result.stdout == ""


def test_a_misspelt_setting_in_dot_env_is_refused_as_in_the_environment(
        tmp_path, monkeypatch, capsys):
    from core.cli import main

    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("OPSGATE_")]:
        monkeypatch.delenv(name)
    (tmp_path / ".env").write_text("# the operator's settings\nOPSGATE_APPROVERS=U0LEAD\n"
                                   "export OPSGATE_APROVERS=U0LEAD\nOPSGATE_PROMETHEUS_ULR="
                                   "http://p\nOTHER_TOOL=1\n", encoding="utf-8")
    assert main(["migrate"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "opsgate: error: OPSGATE_APROVERS in .env: no such setting; did you mean "
        "OPSGATE_APPROVERS?",
        "opsgate: error: OPSGATE_PROMETHEUS_ULR in .env: no such setting; did you mean "
        "OPSGATE_PROMETHEUS_URL?"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [".env"], "nothing may start"


def test_dot_env_settings_are_read_and_held_to_their_form(tmp_path):
    (tmp_path / ".env").write_text("OPSGATE_INCIDENT_CHANNEL=#incident\n", encoding="utf-8")
    refused = opsgate(tmp_path, "migrate")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("opsgate: error: OPSGATE_INCIDENT_CHANNEL=#incident: a "
                                     "channel's name, not its id; expected a Slack channel id")
    assert len(refused.stderr.splitlines()) == 1 and not (tmp_path / "opsgate.db").exists()
    (tmp_path / ".env").write_text("OPSGATE_INCIDENT_CHANNEL=C0INCIDENT\n", encoding="utf-8")
    result = opsgate(tmp_path, "migrate")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "opsgate.db").exists()


def test_the_layers_settings_and_the_tests_own_variables_are_not_refused(tmp_path):
    result = opsgate(tmp_path, "migrate", OPSGATE_INCIDENT_CHANNEL="C0INCIDENT",  # the bot's
                     OPSGATE_MODEL_TIMEOUT_S="5",  # the agent's
                     opsgate_slack_workers="4",  # read case-insensitively, as settings are
                     OPSGATE_TEST_SHUFFLE="7")  # the suite's own (OPSGATE_TEST_*)
    assert result.returncode == 0, result.stderr
    assert "opsgate: error" not in result.stderr


# -- demo -----------------------------------------------------------------------------------


def test_demo_walks_a_case_to_closed_and_prints_its_timeline(tmp_path):
    result = opsgate(tmp_path, "demo", "--walk")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for shown in ("upgraded from an empty schema to head", "replayed: the same",
                  "loop: intake", "loop: agent", "waiting for approval by",
                  "409  illegal_transition", "403  forbidden", "412  version_conflict",
                  "422  approval_refused", "API principals for this run",
                  "the refusal added one timeline row", "EXECUTING v4", "CLOSED v6",
                  'ETag "6"', "5 moves by the consumers", "demo done in",
                  "VERIFYING -> CLOSED v6  stand-in readings (OPSGATE_STATIC_METRICS): "):
        assert shown in out, f"{shown!r} missing from:\n{out}"
    table = out[out.index("time  "):].splitlines()
    assert table[0].split() == ["time", "event", "from", "->", "to", "actor", "outcome"]
    # Readings while the plan's window after the change runs (on the demo's fast clock).
    readings = [line for line in table[2:] if line.split()[1:2] == ["verify_reading"]]
    assert readings and all("  verifier  " in line for line in readings)
    lines = [line for line in table[2:] if line not in readings][:13]
    rows = [line.split()[1:] for line in lines]
    # The offline planner follows the best runbook for "checkout p95 latency over 2 s":
    # latency-after-deploy's canary rollout, two steps.
    assert [row[0] for row in rows] == [
        "case_opened", "start_analysis", "analysis_done", "plan_ready", "agent_usage",
        "awaiting_approval", "plan_approval", "gate_approved", "step_result", "step_result",
        "exec_done", "verify_result", "verify_pass"]
    # The people are API principals linked to Slack ids; approvals are POST /case/{id}/approve.
    actors = ["U0RILEY", "intake", "analyst", "agent", "agent", "gatekeeper", "U0RILEY",
              "U0ALICE", "executor", "executor", "executor", "verifier", "verifier"]
    for line, actor in zip(lines, actors, strict=True):
        assert f"  {actor}  " in line, line
    assert "refused (" in lines[6] and "VERIFYING -> CLOSED" in lines[12]
    assert (tmp_path / "opsgate.db").exists()


def test_demo_runs_again_on_the_same_database(tmp_path):
    url = f"sqlite:///{tmp_path}/demo.db"
    assert opsgate(tmp_path, "demo", "--walk", "--database-url", url).returncode == 0
    again = opsgate(tmp_path, "demo", "--walk", "--database-url", url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already at head" in again.stdout
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        closed = conn.execute("select count(*) from ops_case where status = 'CLOSED'").fetchone()
    assert closed == (2,)


def test_demo_sends_the_bearer_token_when_one_is_set(tmp_path):
    result = opsgate(tmp_path, "demo", "--walk", OPSGATE_API_TOKEN="demo-token")
    assert result.returncode == 0, result.stdout + result.stderr


# -- serve ----------------------------------------------------------------------------------


def wait_healthy(base: str, server: subprocess.Popen[bytes]) -> httpx.Response:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        assert server.poll() is None, "opsgate serve exited before answering"
        try:
            return httpx.get(f"{base}/healthz", timeout=2)
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("opsgate serve did not answer /healthz in time")


def test_serve_answers_over_real_http_and_stops_on_sigterm(tmp_path):
    port, token = free_port(), "serve-token"
    log = (tmp_path / "serve.log").open("wb")
    # --no-loop: the case must stay where this test's own requests put it.
    server = subprocess.Popen(command("serve", "--port", str(port), "--no-loop"), cwd=tmp_path,
                              env=clean_env(OPSGATE_API_TOKEN=token), stdout=log,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        health = wait_healthy(base, server)
        assert health.json() == {"data": {"status": "ok", "database": "sqlite"}}
        key = {"Idempotency-Key": uuid.uuid4().hex}
        refused = httpx.post(f"{base}/case/create", json={"title": "over http"}, headers=key)
        assert refused.status_code == 401
        auth = {**key, "Authorization": f"Bearer {token}"}
        created = httpx.post(f"{base}/case/create", json={"title": "over http"}, headers=auth)
        assert created.status_code == 201, created.text
        case_id = created.json()["data"]["case_id"]
        moved = httpx.patch(f"{base}/case/{case_id}/transition",
                            json={"event": "start_analysis", "actor": "alice"},
                            headers={"Idempotency-Key": uuid.uuid4().hex, "If-Match": '"0"',
                                     "Authorization": f"Bearer {token}"})
        assert (moved.status_code, moved.json()["data"]["status"]) == (200, "ANALYZING")
        assert httpx.get(f"{base}/case/{case_id}").status_code == 401  # reads need it too
        read = httpx.get(f"{base}/case/{case_id}", headers={"Authorization": f"Bearer {token}"})
        assert read.headers["etag"] == '"1"'
    finally:
        server.terminate()
        code = server.wait(timeout=30)
        log.close()
    assert code in (0, -signal.SIGTERM)
    output = (tmp_path / "serve.log").read_text()
    assert f"opsgate API on http://127.0.0.1:{port}" in output
    assert "writes need a bearer token" in output
    assert "upgraded from an empty schema to head" in output
    assert ("metrics: none: plans with a metric check are refused; no metrics source is "
            "configured (set OPSGATE_PROMETHEUS_URL") in output
    # what the configuration leaves out, said at start as /readyz says it
    assert ("warning: no approvers are configured (OPSGATE_APPROVERS): nobody approves, plans "
            "wait at the gate until someone is named") in output
    assert "warning: Slack is not configured (SLACK_BOT_TOKEN)" in output


@pytest.fixture
def empty_pg_schema(postgres_admin: Engine):
    """A PostgreSQL URL whose search_path is a new, empty schema."""
    schema = f"t_cli_{uuid.uuid4().hex[:10]}"
    with postgres_admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"
    with postgres_admin.connect() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


def test_serve_refuses_a_postgres_schema_behind_head_until_migrated(tmp_path, empty_pg_schema):
    refused = opsgate(tmp_path, "serve", "--port", str(free_port()),
                      "--database-url", empty_pg_schema)
    assert refused.returncode == 2
    assert "run `opsgate migrate` first" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    migrated = opsgate(tmp_path, "migrate", "--database-url", empty_pg_schema)
    assert migrated.returncode == 0, migrated.stderr
    assert f"to head ({head_revision()})" in migrated.stdout
    assert "already at head" in opsgate(tmp_path, "migrate", "--database-url",
                                        empty_pg_schema).stdout
