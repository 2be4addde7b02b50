"""The adapter interface: step identity → idempotency key, outcomes, refusals, bounded output,
settings parsing and the registry built from settings."""

from __future__ import annotations

import json

import pytest

from core.api.statuses import error_status
from core.domain.plans import StepAction
from core.errors import Unprocessable
from core.settings import Settings
from core.steps.adapters import StepContext, StepOutcome, StepRefused, adapters_from_settings
from core.steps.adapters.base import parse_params, step_idempotency_key
from core.steps.adapters.noop import NoopParams
from core.steps.capture import BoundedBuffer, truncate


def test_the_same_step_attempt_always_sends_the_same_key():
    first = StepContext.for_step("case-1", "abc", 0, 1, 30)
    assert first.idempotency_key == StepContext.for_step("case-1", "abc", 0, 1, 30).idempotency_key
    assert first.idempotency_key == step_idempotency_key("case-1", "abc", 0, 1)
    others = {step_idempotency_key(*identity) for identity in [
        ("case-2", "abc", 0, 1), ("case-1", "abd", 0, 1), ("case-1", "abc", 1, 1),
        ("case-1", "abc", 0, 2)]}
    assert first.idempotency_key not in others and len(others) == 4


def test_an_outcome_is_json_able():
    outcome = StepOutcome(ok=False, summary="exit 3", output="boom", detail={"exit_code": 3})
    assert json.loads(json.dumps(outcome.as_dict())) == {
        "ok": False, "summary": "exit 3", "output": "boom", "detail": {"exit_code": 3}}


def test_an_outcome_round_trips_through_the_ledger_typed():
    outcome = StepOutcome(ok=False, summary="exit 3", output="boom", detail={"exit_code": 3})
    stored = json.loads(json.dumps(outcome.stored(1.25)))
    assert StepOutcome.from_stored(stored) == (outcome, 1.25)
    assert StepOutcome.from_stored(None) == (StepOutcome(ok=False, summary=""), 0.0)


def test_a_refusal_is_a_422_that_lists_every_problem():
    with pytest.raises(StepRefused) as refused:
        parse_params(NoopParams, {"note": 7, "extra": 1}, "noop")
    assert isinstance(refused.value, Unprocessable) and error_status(refused.value) == 422
    assert refused.value.to_body()["error"]["code"] == "step_refused"
    problems = refused.value.details["problems"]
    assert len(problems) == 2
    assert any(p.startswith("note:") for p in problems)
    assert any(p.startswith("extra:") for p in problems)


def test_output_under_the_limit_is_kept_whole():
    buffer = BoundedBuffer(16)
    for piece in (b"abc", b"def"):
        buffer.feed(piece)
    assert (buffer.text(), buffer.truncated, buffer.total) == ("abcdef", False, 6)


def test_output_over_the_limit_keeps_head_and_tail_with_a_marker():
    buffer = BoundedBuffer(8)
    for piece in (b"0123", b"456789", b"abcdef"):
        buffer.feed(piece)
    assert buffer.truncated and buffer.total == 16
    assert buffer.text() == "0123\n…[8 bytes truncated]…\ncdef"
    assert truncate("x" * 5000, 4096).count("x") == 4096


def test_list_settings_are_json_in_the_environment(monkeypatch):
    monkeypatch.setenv("OPSGATE_SCRIPT_ALLOWLIST", '["/bin/echo", "true"]')
    monkeypatch.setenv("OPSGATE_HTTP_ALLOWLIST", '["http://127.0.0.1:8081/"]')
    monkeypatch.setenv("OPSGATE_STEP_OUTPUT_LIMIT", "1024")
    settings = Settings(_env_file=None)
    assert settings.script_allowlist == ["/bin/echo", "true"]
    assert settings.http_allowlist == ["http://127.0.0.1:8081/"]
    assert settings.step_output_limit == 1024


def test_the_defaults_allow_nothing(monkeypatch):
    for name in ("SCRIPT_ALLOWLIST", "HTTP_ALLOWLIST", "KUBECTL", "TRAFFIC_GATEWAY_URL",
                 "PROMETHEUS_URL", "STEP_OUTPUT_LIMIT"):
        monkeypatch.delenv(f"OPSGATE_{name}", raising=False)
    settings = Settings(_env_file=None)
    assert (settings.script_allowlist, settings.http_allowlist) == ([], [])
    assert settings.traffic_gateway_url is None and settings.prometheus_url is None
    assert (settings.kubectl, settings.step_output_limit) == ("kubectl", 4096)


def test_every_plan_action_has_an_adapter():
    adapters = adapters_from_settings(Settings(_env_file=None))
    assert set(adapters) == {action.value for action in StepAction}
    assert all(name == adapter.action for name, adapter in adapters.items())


def test_noop_echoes_its_params():
    noop = adapters_from_settings(Settings(_env_file=None))["noop"]
    outcome = noop.run({"note": "observe only"}, StepContext.for_step("c", "h", 0, 1, 10))
    assert outcome.ok and outcome.detail == {"params": {"note": "observe only"}}
    assert "observe only" in outcome.summary
    with pytest.raises(StepRefused, match="rm: Extra inputs are not permitted"):
        noop.run({"rm": "-rf"}, StepContext.for_step("c", "h", 0, 1, 10))


@pytest.mark.parametrize("text", ["/bin/echo,/bin/true", " /bin/echo , /bin/true,",
                                  '["/bin/echo", "/bin/true"]'])
def test_a_list_setting_is_comma_separated_or_json(monkeypatch, text):
    monkeypatch.setenv("OPSGATE_SCRIPT_ALLOWLIST", text)
    assert Settings(_env_file=None).script_allowlist == ["/bin/echo", "/bin/true"]
