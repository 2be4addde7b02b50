"""The attempts of a case, read from its timeline (pure): which approved plans failed, whether the
latest resume asked for a retry, why the plan that already failed may not come back, and what a
replan starts from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from core.domain.attempts import asks_retry, failed_attempts, repeat_refusal, replan_of


@dataclass(frozen=True)
class Row:
    event: str
    outcome: str | None = "accepted"
    plan_hash: str | None = None
    reason: str | None = None
    actor: str = "someone"
    context: Mapping[str, Any] = field(default_factory=dict)


FAILED = [Row("plan_ready", plan_hash="aaa"), Row("gate_approved", plan_hash="aaa"),
          Row("step_result", outcome="note"),
          Row("exec_failed", reason="step 1 (script.exec) failed: exit 3; rolled back")]


@pytest.mark.parametrize(("words", "retry"), [
    ("retry", True), ("Retry, the node is back", True), ("please try again", True),
    ("same plan please", True), ("drain the queue first", False), ("", False),
    ("retrying is pointless, roll back instead", False)])
def test_which_words_ask_for_a_retry(words: str, retry: bool) -> None:
    assert asks_retry(words) is retry


def test_the_failed_plan_is_the_last_approved_before_the_failure() -> None:
    attempts = failed_attempts([*FAILED, Row("resume", actor="U1"),
                                Row("plan_ready", plan_hash="bbb"),
                                Row("gate_approved", plan_hash="bbb"),
                                Row("verify_failed", reason="error_rate 0.2 ≥ 0.01")])
    assert [(a.plan_hash, a.event) for a in attempts] == [("aaa", "exec_failed"),
                                                         ("bbb", "verify_failed")]


def test_the_same_plan_is_refused_until_a_person_asks_for_a_retry() -> None:
    resumed = [*FAILED, Row("resume", actor="U1", reason="drain the queue first")]
    said = repeat_refusal("aaa", resumed)
    assert said is not None and said.startswith(
        "this exact plan (hash aaa) already failed on this case (its steps failed: step 1 "
        "(script.exec) failed: exit 3; rolled back)")
    assert repeat_refusal("ccc", resumed) is None  # another plan may come
    assert repeat_refusal("aaa", [*FAILED, Row("resume", reason="retry")]) is None
    assert repeat_refusal("aaa", [*FAILED, Row("resume", context={"retry": True})]) is None


def test_a_rejected_plan_has_not_failed_but_is_declined() -> None:
    rows = [Row("plan_ready", plan_hash="aaa"), Row("gate_rejected", plan_hash="aaa"),
            Row("resume")]
    assert failed_attempts(rows) == []
    assert repeat_refusal("aaa", rows) is not None  # issue 41: not the rejected plan again


def test_a_replan_starts_from_the_words_and_the_failed_attempt() -> None:
    replan = replan_of([*FAILED, Row("plan_ready", outcome="refused"),
                        Row("resume", actor="U1", reason="drain the queue",
                            context={"suggestion": "drain the queue", "retry": False})])
    assert replan is not None
    assert (replan.resumed.actor, replan.resumed.words, replan.resumed.retry) == (
        "U1", "drain the queue", False)
    assert (replan.parked_by, replan.failed and replan.failed.plan_hash) == ("exec_failed", "aaa")
    assert replan_of(FAILED) is None  # not resumed
    assert replan_of([*FAILED, Row("resume"), Row("plan_ready", plan_hash="bbb")]) is None


REJECTED = [Row("plan_ready", plan_hash="rrr"),
            Row("gate_rejected", plan_hash="rrr", reason="restart instead", actor="U0APPROVER")]


def test_a_rejected_plan_does_not_come_back_unless_a_retry_is_asked() -> None:
    resumed = [*REJECTED, Row("resume", actor="U0CAROL")]
    said = repeat_refusal("rrr", resumed)
    assert said is not None and "was rejected at the gate" in said
    assert '"restart instead"' in said
    assert repeat_refusal("sss", resumed) is None
    assert repeat_refusal("rrr", [*REJECTED, Row("resume", reason="retry please")]) is None


def test_a_replan_after_a_reject_names_the_rejected_plan_and_its_reason() -> None:
    replan = replan_of([*REJECTED, Row("resume", actor="U0CAROL", reason="restart the pods")])
    assert replan is not None
    assert replan.parked_by == "gate_rejected" and replan.parked_because == "restart instead"
    assert replan.failed is not None and replan.failed.plan_hash == "rrr"
    assert replan.failed.event == "gate_rejected"
    assert [a.plan_hash for a in replan.declined] == ["rrr"]
