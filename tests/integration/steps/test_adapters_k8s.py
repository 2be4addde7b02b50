"""k8s.rollout through a fake ``kubectl`` (a script that records its argv and exits as told):
the exact commands, their order, failure handling, and the timeout budget."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from core.steps.adapters import StepContext, StepRefused, adapters_from_settings
from core.steps.adapters.k8s import K8sRolloutAdapter


class FakeKubectl:
    """Appends its argv to a file (fields ended by \\x1f); exits with the code written for its
    verb (``rollout restart`` → "restart", ``rollout status`` → "status"…), else 0."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "kubectl"
        self.calls_file = tmp_path / "calls"
        self.codes_dir = tmp_path / "codes"
        self.codes_dir.mkdir()
        self.path.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            for arg in "$@"; do printf '%s\\037' "$arg"; done >> '{self.calls_file}'
            printf '\\n' >> '{self.calls_file}'
            if [ "$3" = rollout ]; then verb="$4"; else verb="$3"; fi
            if [ -e '{self.codes_dir}'/"$verb".hang ]; then sleep 60; fi
            echo "kubectl $*"
            if [ -e '{self.codes_dir}'/"$verb" ]; then exit "$(cat '{self.codes_dir}'/"$verb")"; fi
            exit 0
            """))
        self.path.chmod(0o755)

    def exits(self, verb: str, code: int) -> None:
        (self.codes_dir / verb).write_text(str(code))

    def hangs(self, verb: str) -> None:
        (self.codes_dir / f"{verb}.hang").write_text("")

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        lines = self.calls_file.read_text().splitlines()
        return [line.split("\x1f")[:-1] for line in lines]


@pytest.fixture
def kubectl(tmp_path: Path) -> FakeKubectl:
    return FakeKubectl(tmp_path)


def run(kubectl: FakeKubectl, params: Mapping[str, Any], timeout_s: float = 5.0):
    adapter = K8sRolloutAdapter(str(kubectl.path), 4096, grace_s=0.3)
    return adapter.run(params, StepContext.for_step("case", "hash", 0, 1, timeout_s))


TARGET = {"deployment": "checkout", "namespace": "prod"}


def test_restart_then_waits_for_the_rollout(kubectl):
    outcome = run(kubectl, {"operation": "restart", **TARGET})
    assert outcome.ok, outcome.summary
    assert kubectl.calls() == [
        ["-n", "prod", "rollout", "restart", "deployment/checkout"],
        ["-n", "prod", "rollout", "status", "deployment/checkout", "--timeout=4s"],
    ]
    assert "$ kubectl -n prod rollout restart deployment/checkout" in outcome.output
    assert [c["exit_code"] for c in outcome.detail["commands"]] == [0, 0]


def test_undo_to_a_revision_and_set_image(kubectl):
    assert run(kubectl, {"operation": "undo", "to_revision": 4, **TARGET}).ok
    image = "registry.example.com/shop/checkout:v1.2.3"
    assert run(kubectl, {"operation": "set-image", "container": "app", "image": image,
                         **TARGET}).ok
    changes = [call for call in kubectl.calls() if "status" not in call]
    assert changes == [
        ["-n", "prod", "rollout", "undo", "deployment/checkout", "--to-revision=4"],
        ["-n", "prod", "set", "image", "deployment/checkout", f"app={image}"],
    ]


def test_a_failed_change_fails_the_step_and_skips_the_status_wait(kubectl):
    kubectl.exits("restart", 1)
    outcome = run(kubectl, {"operation": "restart", **TARGET})
    assert not outcome.ok and "exit 1" in outcome.summary
    assert len(kubectl.calls()) == 1


def test_a_rollout_that_does_not_finish_fails_the_step(kubectl):
    kubectl.exits("status", 1)
    outcome = run(kubectl, {"operation": "restart", **TARGET})
    assert not outcome.ok
    assert [c["exit_code"] for c in outcome.detail["commands"]] == [0, 1]


def test_the_step_timeout_bounds_both_commands(kubectl):
    kubectl.hangs("status")
    outcome = run(kubectl, {"operation": "restart", **TARGET}, timeout_s=1.0)
    assert not outcome.ok and outcome.detail["commands"][-1]["timed_out"]
    assert outcome.detail["duration_s"] < 5


def test_bad_names_are_refused_before_kubectl_runs(kubectl):
    for params in ({"operation": "restart", "deployment": "checkout --all", "namespace": "prod"},
                   {"operation": "restart", "deployment": "checkout", "namespace": "-A"},
                   {"operation": "set-image", "container": "app", "image": "x;id", **TARGET}):
        with pytest.raises(StepRefused):
            run(kubectl, params)
    assert kubectl.calls() == []


def test_a_missing_kubectl_is_refused(tmp_path):
    adapter = K8sRolloutAdapter(str(tmp_path / "no-kubectl"), 4096)
    with pytest.raises(StepRefused, match="kubectl not found"):
        adapter.run({"operation": "restart", **TARGET}, StepContext.for_step("c", "h", 0, 1, 5))


def test_the_kubectl_setting_is_used(kubectl):
    settings = Settings(_env_file=None, kubectl=str(kubectl.path))
    outcome = adapters_from_settings(settings)["k8s.rollout"].run(
        {"operation": "restart", **TARGET}, StepContext.for_step("c", "h", 0, 1, 5))
    assert outcome.ok and len(kubectl.calls()) == 2
