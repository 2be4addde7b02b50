"""compose.yaml as a first deploy reads it: every setting a first deploy needs is there, each
CHANGE-ME placeholder makes the settings loader (and so every opsgate process) refuse in one line
naming it until it is filled, the filled file loads, the Slack mode is manifest.yml's, and each
process has its own healthcheck (serve: /healthz; relay and consume: ``opsgate health``).
Compose's own interpolation (``${VAR:-default}``, ``${VAR:?message}``) is applied as compose
applies it to an environment where the operator has set nothing but POSTGRES_PASSWORD."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.cli.app import plugged_in
from core.settings import PLACEHOLDER, InvalidSettings, load_settings
from tests.support.processes import clean_env, command

ROOT = Path(__file__).resolve().parents[3]
OPSGATE_SERVICES = ("migrate", "api", "relay", "consume")
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z_]+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")

# What an operator fills in: one real-looking value for each placeholder.
FILLED = {
    "OPSGATE_API_TOKEN": "svc-token-4f1c",
    "OPSGATE_ALERT_TOKEN": "alert-token-9e2a",
    "OPSGATE_ALLOWED_HOSTS": "opsgate.internal.example.com",
    "OPSGATE_APPROVERS": "U0ALICE,U0BOB",
    "SLACK_BOT_TOKEN": "xoxb-1-2-abc",
    "SLACK_APP_TOKEN": "xapp-1-A1-2-def",
    "OPSGATE_INCIDENT_CHANNEL": "C0INCIDENT",
    "OPSGATE_MODEL": "gpt-4o-mini",
    "OPENAI_BASE_URL": "https://llm.internal.example.com/v1",
    "OPENAI_API_KEY": "sk-local-123",
    "OPSGATE_PROMETHEUS_URL": "http://prometheus.monitoring:9090",
}


def interpolated(value: str, operator_set: dict[str, str]) -> str:
    def one(found: re.Match[str]) -> str:
        name, op, arg = found["name"], found["op"], found["arg"]
        if operator_set.get(name):
            return operator_set[name]
        if op == ":?":
            raise AssertionError(f"compose refuses: {arg}")
        assert op == ":-", f"${{{name}}} without a default or a refusal"
        return arg

    return VARIABLE.sub(one, value)


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def environment(service: str, operator_set: dict[str, str]) -> dict[str, str]:
    written = compose()["services"][service]["environment"]
    return {name: interpolated(str(value), operator_set) for name, value in written.items()}


def test_every_opsgate_service_reads_one_environment_with_every_placeholder():
    envs = [environment(service, {"POSTGRES_PASSWORD": "pw"}) for service in OPSGATE_SERVICES]
    assert all(env == envs[0] for env in envs)
    left = {name for name, value in envs[0].items() if PLACEHOLDER in value}
    assert left == set(FILLED)


def test_postgres_password_is_refused_by_compose_itself_until_set():
    with pytest.raises(AssertionError, match="compose refuses: set POSTGRES_PASSWORD"):
        environment("api", {})


@pytest.mark.parametrize("name", sorted(FILLED))
def test_each_placeholder_left_refuses_in_one_line(monkeypatch, name):
    env = environment("api", {"POSTGRES_PASSWORD": "pw", **FILLED})
    env[name] = environment("api", {"POSTGRES_PASSWORD": "pw"})[name]
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(InvalidSettings) as refused:
        load_settings(*plugged_in().settings)
    assert refused.value.problems == [
        f"{name}: still the placeholder CHANGE-ME of the deploy files; set it to your own "
        "value (docs/deploy.md)"]


def test_the_filled_file_loads(monkeypatch):
    for variable, value in environment("api", {"POSTGRES_PASSWORD": "pw", **FILLED}).items():
        monkeypatch.setenv(variable, value)
    settings = load_settings(*plugged_in().settings)
    assert settings.bus_kind == "redis-streams"
    assert settings.database_url.startswith("postgresql+psycopg://opsgate:pw@postgres:5432/")


def test_a_process_of_the_unfilled_file_refuses_to_start_one_line_each(tmp_path):
    env = environment("relay", {"POSTGRES_PASSWORD": "pw"})
    started = subprocess.run(command(*compose()["services"]["relay"]["command"]), cwd=tmp_path,
                             env=clean_env(**env), capture_output=True, text=True, timeout=60,
                             check=False)
    assert started.returncode == 2
    assert started.stderr.splitlines() == [
        f"opsgate: error: {name}: still the placeholder CHANGE-ME of the deploy files; set it "
        "to your own value (docs/deploy.md)" for name in sorted(FILLED)]


def test_the_slack_mode_is_the_manifests():
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text())
    socket_mode = manifest["settings"]["socket_mode_enabled"]
    api = compose()["services"]["api"]
    env = environment("api", {"POSTGRES_PASSWORD": "pw"})
    assert ("--socket-mode" in api["command"]) is socket_mode
    assert ("SLACK_APP_TOKEN" in env) is socket_mode
    assert ("SLACK_SIGNING_SECRET" in env) is not socket_mode


def test_each_process_has_its_own_healthcheck():
    services = compose()["services"]
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["api"]["command"][0] == "serve"
    for role in ("relay", "consume"):
        assert services[role]["command"] == [role]
        assert services[role]["healthcheck"]["test"] == ["CMD", "opsgate", "health", role]
    env = environment("relay", {"POSTGRES_PASSWORD": "pw"})
    assert env["OPSGATE_HEARTBEAT_DIR"] == "/tmp"
    for service in (*OPSGATE_SERVICES, "postgres", "redis"):
        expected = "no" if service == "migrate" else "unless-stopped"
        assert services[service]["restart"] == expected
