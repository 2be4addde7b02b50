"""Changes say what they changed (issue 41), on SQLite and PostgreSQL: the intake records a
change's ``target`` (``KIND/NAME``) and its values ``before`` and ``after`` from the generic JSON,
Argo CD's notification and GitHub's deployment payload; a target of another shape or an
oversized value is refused naming the field and records nothing; the investigator's
``recent_changes`` answers them as data."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, select

from core.api import changes as changes_api
from core.catalog.files import load_catalog
from core.changes import ChangeIntake, ChangeStore, InvalidChange, Recorded
from core.db.tables import change_record
from core.investigate.looks import CaseLooks, Sources
from core.investigate.scope import scope_of
from core.investigate.tools import ChangesArgs
from tests.support.api import rows
from tests.support.change_deliveries import (
    INJECTED,
    REVISION,
    argo_app,
    argocd_delivery,
    generic,
    github_event,
)

CATALOG = Path(__file__).parents[3] / "docs" / "examples" / "catalog"
T0 = datetime(2026, 11, 27, 14, 10, tzinfo=UTC)
# What the intake fingerprinted generic(), the Argo CD sync and the GitHub deploy of these tests
# as before target, before and after existed: a redelivery after the upgrade is still a retry.
FINGERPRINT_BEFORE_TARGETS = "5cc3cc9ec4f31532f1d6976af6afd6169c8a63f9d843609dde9ca23155d9a2f5"
ARGO_FINGERPRINT_BEFORE = "96ee15b546ded5aa7f7a2146eb9a90964c75ea514a6a0960d79ad5b27a9da929"
GITHUB_FINGERPRINT_BEFORE = "0150eaa4c1d9891ad0be2a97e6d20e6e922e3aa80bd760613fc5be1ea5c96d5d"
CONFIG = {"payout.timeout": "3s", "payout.retries": "2"}


@pytest.fixture
def intake(engine: Engine) -> ChangeIntake:
    catalog = load_catalog(CATALOG)
    return ChangeIntake(ChangeStore(engine), lambda: catalog, clock=lambda: T0)


def received(intake: ChangeIntake, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    outcome = intake.receive(json.dumps(body).encode(), **headers)
    assert isinstance(outcome, Recorded) and outcome.created, outcome
    return outcome.change.as_dict()


def test_a_generic_change_records_its_target_and_values_and_recent_changes_returns_them(
        intake, engine):
    said = received(intake, generic(kind="config", target="configmap/payments-config",
                                    before={**CONFIG, "payout.timeout": "3000ms"},
                                    after={**CONFIG, "note": INJECTED}))
    assert said["target"] == "configmap/payments-config"
    assert said["before"]["payout.timeout"] == "3000ms"
    assert said["after"] == {**CONFIG, "note": INJECTED}  # kept as the sender's data
    flag = received(intake, generic(id="flags-1", kind="config", target="flag/new_checkout.v2",
                                    before={"rollout": 0}, after={"rollout": 50},
                                    at="2026-11-27T13:50:00Z"))
    assert (flag["target"], flag["before"], flag["after"]) \
        == ("flag/new_checkout.v2", {"rollout": 0}, {"rollout": 50})
    with engine.connect() as conn:
        stored = conn.execute(select(change_record.c.target, change_record.c.before,
                                     change_record.c.after)
                              .where(change_record.c.change_id == "flags-1")).one()
    assert tuple(stored) == ("flag/new_checkout.v2", {"rollout": 0}, {"rollout": 50})

    looks = CaseLooks(scope_of(load_catalog(CATALOG), ["payments-api"], None), T0,
                      Sources(changes=ChangeStore(engine)), now=lambda: T0)
    answer = looks.recent_changes(ChangesArgs(component="payments-api", hours=6))
    assert [(c["change_id"], c["target"], c["before"], c["after"])
            for c in answer["changes"]] == [
        ("flags-1", "flag/new_checkout.v2", {"rollout": 0}, {"rollout": 50}),
        ("ci-payments-api-4711", "configmap/payments-config", said["before"], said["after"])]


def test_a_change_that_says_nothing_of_them_is_stored_and_fingerprinted_as_before(intake,
                                                                                  engine):
    said = received(intake, generic())
    assert (said["target"], said["before"], said["after"]) == (None, None, None)
    with engine.connect() as conn:  # SQL NULL, not JSON null
        assert conn.execute(select(change_record.c.id).where(
            change_record.c.before.is_(None), change_record.c.after.is_(None))).all()
    # a retry of a delivery recorded before these fields existed still matches its fingerprint
    assert said["fingerprint"] == FINGERPRINT_BEFORE_TARGETS


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("target", "deploy/payments-api", "target must be deployment/NAME, configmap/NAME, flag/KEY"),
    ("target", "configmap/Payments_Config", "not 'configmap/Payments_Config'"),
    ("target", "deployment/", "target must be deployment/NAME"),
    ("target", "payments-api", "target must be deployment/NAME"),
    ("target", ["deployment/payments-api"], "target must be text on one line"),
    ("before", {"data": "x" * 9000}, "before is over 8192 characters as JSON"),
])
def test_a_bad_target_or_an_oversized_value_is_refused_naming_it_and_records_nothing(
        intake, engine, field, value, expected):
    with pytest.raises(InvalidChange, match="cannot be recorded") as refused:
        intake.receive(json.dumps(generic(**{field: value})).encode())
    assert expected in str(refused.value)
    assert rows(engine, change_record) == 0


def test_argo_cd_s_notification_fills_the_synced_revision_and_what_the_template_adds(intake):
    body, headers = argocd_delivery(argo_app(REVISION, "2026-11-27T14:05:11Z",
                                             {"username": "dana"}))
    plain = intake.receive(body, declared=headers.get("X-Opsgate-Source"))
    assert isinstance(plain, Recorded)
    assert (plain.change.target, plain.change.before, plain.change.after) \
        == (None, None, REVISION)
    assert plain.change.fingerprint == ARGO_FINGERPRINT_BEFORE
    extended = {**json.loads(body), "finishedAt": "2026-11-27T14:06:00Z",
                "target": "deployment/payments-api", "previousRevision": "1" * 40}
    said = received(intake, extended, declared="argocd")
    assert (said["target"], said["before"], said["after"]) \
        == ("deployment/payments-api", "1" * 40, REVISION)
    absent = {**extended, "finishedAt": "2026-11-27T14:07:00Z", "target": "<no value>",
              "previousRevision": "<no value>"}  # what Argo CD renders for a missing field
    assert (received(intake, absent, declared="argocd")["target"]) is None
    bad = {**extended, "target": "application/payments-api"}
    with pytest.raises(InvalidChange, match="target must be deployment/NAME"):
        intake.receive(json.dumps(bad).encode(), declared="argocd")


def test_github_s_deployment_fills_the_ref_and_its_payload_s_target_and_before(intake):
    plain = received(intake, github_event(), github_event="deployment_status")
    assert (plain["target"], plain["before"], plain["after"]) == (None, None, "v2.4.1")
    assert plain["fingerprint"] == GITHUB_FINGERPRINT_BEFORE
    event = github_event(status_id=3, deployment_id=146)
    event["deployment"]["payload"] = json.dumps(  # GitHub keeps a string payload as sent
        {"target": "deployment/payments-api", "before": "v2.4.0"})
    said = received(intake, event, github_event="deployment_status")
    assert (said["target"], said["before"], said["after"]) \
        == ("deployment/payments-api", "v2.4.0", "v2.4.1")
    scaled = github_event(status_id=4, deployment_id=147)
    scaled["deployment"]["payload"] = {"target": "hpa/payments-api", "before": {"max": 4},
                                       "after": {"max": 8}}
    said = received(intake, scaled, github_event="deployment_status")
    assert (said["target"], said["before"], said["after"]) \
        == ("hpa/payments-api", {"max": 4}, {"max": 8})
    wrong = github_event(status_id=5, deployment_id=148)
    wrong["deployment"]["payload"] = {"target": "pod/payments-api-0"}
    with pytest.raises(InvalidChange, match=r"deployment\.payload\.target must be"):
        intake.receive(json.dumps(wrong).encode(), github_event="deployment_status")


def test_text_in_the_values_is_made_storable(intake):
    said = received(intake, generic(before={"a\ud800": "b\x00c"}, after=["\udfff", 3, None]))
    assert said["before"] == {"a\ufffd": "b\ufffdc"}
    assert said["after"] == ["\ufffd", 3, None]
    assert ChangeStore(intake.store.engine).last_before(
        ["payments-api"], [], T0 + timedelta(days=1)).before == said["before"]


def test_openapi_documents_the_target_and_values_sent_and_answered():
    api = FastAPI()
    api.include_router(changes_api.router)
    spec = api.openapi()
    sent = spec["paths"]["/changes"]["post"]["requestBody"]["content"]["application/json"]
    target = sent["schema"]["properties"]["target"]
    assert re.fullmatch(target["pattern"], "configmap/payments-config")
    assert not re.fullmatch(target["pattern"], "deploy/payments-api")
    answered = spec["components"]["schemas"]["ChangeView"]["properties"]
    assert {"target", "before", "after"} <= answered.keys()
    assert "201" in spec["paths"]["/changes"]["post"]["responses"]
