"""A finished process as a step's outcome: the one reading of exit code, timeout and output
shared by script.exec and k8s.rollout."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from core.steps.adapters.base import StepOutcome
from core.steps.process import ProcessResult


def process_summary(result: ProcessResult, label: str) -> str:
    if result.timed_out:
        return f"{label}: killed at its {result.duration_s:.1f}s timeout"
    if result.exit_code < 0:
        return f"{label}: killed by signal {-result.exit_code} after {result.duration_s:.1f}s"
    return f"{label}: exit {result.exit_code} after {result.duration_s:.1f}s"


def process_detail(result: ProcessResult) -> dict[str, Any]:
    return {
        "argv": list(result.argv),
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "duration_s": result.duration_s,
        "output_bytes": result.output_bytes,
    }


def succeeded(result: ProcessResult) -> bool:
    return result.exit_code == 0 and not result.timed_out


def process_outcome(result: ProcessResult, label: str) -> StepOutcome:
    return StepOutcome(ok=succeeded(result), summary=process_summary(result, label),
                       output=result.output, detail=process_detail(result))


def start_failure(argv: Sequence[str], label: str, exc: OSError) -> StepOutcome:
    """The process could not start (vanished executable, bad cwd): the step ran and failed."""
    return StepOutcome(ok=False, summary=f"{label}: could not start: {exc.strerror or exc}",
                       detail={"argv": list(argv), "error": str(exc)})


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as a copy-pastable line for humans; never executed."""
    return shlex.join(argv)
