"""The one error hierarchy: every exception class opsgate defines derives from ``OpsgateError``,
a failed gateway result raises its typed error on demand, and a service reply says its outcome
while only the REST API knows the HTTP status it is sent with."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest

from core.api.statuses import error_status, reply_status
from core.api.walkthrough.execute import OffPlan
from core.cases.replies import Reply, ReplyOutcome
from core.domain.plans import canonical_json
from core.errors import (
    IllegalTransition,
    InternalError,
    KeyReuse,
    NotFound,
    OpsgateError,
    StaleFence,
    VersionConflict,
    error_from_body,
)
from core.gateway import CallResult, CallStatus, ToolCallFailed
from core.mcp.remote import RemoteUnavailable
from core.strict_json import NonFiniteNumber, loads


def _modules() -> list[str]:
    names = []
    for package in ("core", "agent", "bot"):
        root = importlib.import_module(package)
        names += [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return names


def test_every_exception_class_we_define_is_an_opsgate_error() -> None:
    outside = []
    for name in _modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            # Private signals (a refusal carried out of a transaction, a lost insert race)
            # never leave their module.
            if (cls.__module__ == name and issubclass(cls, BaseException)
                    and not cls_name.startswith("_") and not issubclass(cls, OpsgateError)):
                outside.append(f"{name}.{cls_name}")
    assert outside == []


def test_a_failed_call_raises_its_typed_error_on_demand() -> None:
    refused = CallResult(CallStatus.REFUSED, "k1", error={"code": "idempotency_key_reused",
                                                          "message": "used before"})
    with pytest.raises(ToolCallFailed, match="chat post for message 7: refused") as failed:
        refused.raise_for_error("chat post for message 7")
    assert isinstance(failed.value, InternalError)
    assert failed.value.details["key"] == "k1"
    assert isinstance(refused.refusal, KeyReuse)
    busy = CallResult(CallStatus.IN_PROGRESS, "k2")
    with pytest.raises(ToolCallFailed, match="in_progress"):
        busy.raise_for_error("reply in thread")
    assert busy.refusal is None
    done = CallResult(CallStatus.REPLAYED, "k3", result={"ts": "1.2"})
    done.raise_for_error("never raises")
    assert done.refusal is None


def test_a_code_no_class_claims_keeps_its_code() -> None:
    error = error_from_body({"error": {"code": "insufficient_funds", "message": "no",
                                       "details": {"balance": 3}}})
    assert type(error) is OpsgateError and error.code == "insufficient_funds"
    assert error.to_body() == {"error": {"code": "insufficient_funds", "message": "no",
                                         "details": {"balance": 3}}}
    assert type(error_from_body(OffPlan("not next").to_body())) is OffPlan


def test_non_finite_numbers_stay_value_errors() -> None:
    with pytest.raises(ValueError, match="NaN"):
        loads('{"x": NaN}')
    assert issubclass(NonFiniteNumber, OpsgateError)


@pytest.mark.parametrize(("error", "outcome", "status"), [
    (IllegalTransition("no such move"), ReplyOutcome.MOVED_ON, 409),
    (VersionConflict("stale version"), ReplyOutcome.MOVED_ON, 412),
    (StaleFence("stale fence"), ReplyOutcome.MOVED_ON, 412),
    (KeyReuse("used before"), ReplyOutcome.REFUSED, 422),
    (OffPlan("not next"), ReplyOutcome.REFUSED, 422),
    (NotFound("no case"), ReplyOutcome.REFUSED, 404),
])
def test_a_refusal_has_an_outcome_and_only_the_api_a_status(error: OpsgateError,
                                                            outcome: ReplyOutcome,
                                                            status: int) -> None:
    reply = Reply.of_error(error)
    assert reply.outcome is outcome and not reply.ok
    assert reply.moved_on is (outcome is ReplyOutcome.MOVED_ON)
    assert type(reply.error) is type(error)
    assert reply_status(reply) == status == error_status(error)
    with pytest.raises(type(error)):
        reply.data()


def test_done_replies_are_sent_with_their_outcome_status() -> None:
    assert [reply_status(Reply.of_data({"x": 1}, outcome))
            for outcome in (ReplyOutcome.DONE, ReplyOutcome.CREATED, ReplyOutcome.WAITING)] \
        == [200, 201, 202]
    assert Reply.of_data({"x": 1}).error is None
    assert error_status(RemoteUnavailable("down")) == 502
    assert error_status(ToolCallFailed("failed")) == 500


def test_a_stage_reply_kept_with_its_status_reads_back_with_its_outcome() -> None:
    from core.api.walkthrough.once import kept, unkept

    waiting = canonical_json({"data": {"verification": {"event": None}}})
    closed = canonical_json({"data": {"verification": {"event": "verify_ok"}}})
    gated = canonical_json({"data": {"approval": {"state": "pending"}}})
    refused = canonical_json(IllegalTransition("not verifying").to_body())
    assert [unkept({"status": status, "body": body}, replayed=True).outcome
            for status, body in ((202, waiting), (200, closed), (200, gated), (409, refused))] \
        == [ReplyOutcome.WAITING, ReplyOutcome.DONE, ReplyOutcome.DONE, ReplyOutcome.MOVED_ON]
    reply = Reply.of_data(json.loads(waiting)["data"], ReplyOutcome.WAITING)
    assert unkept(kept(reply), replayed=True) == Reply(ReplyOutcome.WAITING, reply.body, True)
