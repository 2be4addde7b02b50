"""A parsed plan in words: each step and rollback step as its adapter says it, and each verify
check as the condition it waits for ("http_5xx_ratio below 0.01 for 5 min after the change").
What the approver reads; the JSON stays one click away in the chat's details view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from core.domain.plans import PlanStep, StepAction
from core.domain.verify import MetricCheck, ProbeCheck, VerifyBlock
from core.steps.adapters import gateway_flip, http, k8s, k8s_objects, mcp_call, noop, script
from core.steps.words import Sentence, Value

DESCRIBE: Mapping[StepAction, Callable[[Mapping[str, Any]], Sentence]] = {
    StepAction.K8S_ROLLOUT: k8s.describe,
    StepAction.SCRIPT_EXEC: script.describe,
    StepAction.GATEWAY_FLIP: gateway_flip.describe,
    StepAction.NOOP: noop.describe,
    StepAction.HTTP_REQUEST: http.describe,
    StepAction.MCP_CALL: mcp_call.describe,
    StepAction.K8S_SCALE: k8s_objects.describe_scale,
    StepAction.K8S_CONFIGMAP: k8s_objects.describe_configmap,
    StepAction.FLAG_SET: k8s_objects.describe_flag,
}
"""Each action's adapter's sentence for a step's params."""


def step_sentence(step: PlanStep) -> Sentence:
    """The step in words, as its adapter would run it."""
    return DESCRIBE[step.action](step.params)


def check_sentence(check: MetricCheck | ProbeCheck) -> Sentence:
    """A verify check in words: "p95 below 0.5 for 5 min after the change", "a GET of … answers
    2xx"."""
    if isinstance(check, ProbeCheck):
        expected = check.probe.expect_status
        answer = "2xx" if expected is None else " or ".join(map(str, expected))
        return ("A GET of ", Value(check.probe.url), f" answers {answer}")
    held = f" for {duration(check.for_s)} after the change" if check.for_s else \
        " once the change is done"
    return (Value(check.metric), f" {check.bounds()}{held}")


def verify_sentences(block: VerifyBlock) -> list[Sentence]:
    """Every check of the block in words."""
    return [check_sentence(check) for check in block.checks]


def duration(seconds: float) -> str:
    """``300`` → "5 min", ``90`` → "90 s", ``7200`` → "2 h"."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
