"""Policy files reload like the catalog (issue 40): an added ``.cedar`` file decides the next
click without a restart, a file with a problem makes nobody an approver until it is fixed (a
broken file could have been a forbid), and the version in force follows the files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from core.bootstrap import policy_from_settings
from core.catalog import CatalogSource
from core.policy.files import PolicySource
from core.policy.rules import PolicyError
from core.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
ALICE, DANA = "U0ALICE", "U0DANA"
ROLLOUT = {
    "title": "Roll payments-api back", "risk_score": 0.3,
    "steps": [{"action": "k8s.rollout", "params": {
        "operation": "undo", "namespace": "payments", "deployment": "payments-api"},
        "timeout_s": 300, "retry": 0}],
    "rollback": {"action": "noop"},
    "verify": {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 60},
}
COMMANDERS = """\
@id("incident-commanders-approve")
permit (principal in Group::"incident-commanders", action == Action::"approve", resource);
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> None:
    """``text``, with a modification time after the last one whatever the clock's tick."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    later = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(later, later))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    policies = tmp_path / "policies"
    policies.mkdir()
    shutil.copy(EXAMPLES / "policies" / "owners.cedar", policies)
    return policies


def test_an_added_file_decides_without_a_restart_and_a_broken_one_refuses_everyone(folder):
    clock = Clock()
    source = PolicySource(folder, check_every_s=2.0, clock=clock)
    settings = Settings(catalog=EXAMPLES / "catalog", policy=folder, directory=["catalog"],
                        approvers=[])
    policy = policy_from_settings(settings, catalog=CatalogSource(settings.catalog),
                                  policies=source).at((), None)
    first = policy.cedar.version
    assert policy.refusal(DANA, "U0ERIN", ROLLOUT) is not None
    assert policy.refusal(ALICE, "U0ERIN", ROLLOUT) is None

    write(folder / "commanders.cedar", COMMANDERS)
    clock.now += 2
    assert policy.refusal(DANA, "U0ERIN", ROLLOUT) is None
    assert policy.cedar.version != first

    write(folder / "commanders.cedar", COMMANDERS.replace("permit", "permti"))
    clock.now += 2
    for person in (ALICE, DANA):
        assert policy.refusal(person, "U0ERIN", ROLLOUT) == (
            f"{person} may not approve this plan: refused by policy policy-files-broken (the "
            "approval policy files (OPSGATE_POLICY) have a problem; nobody approves until "
            "they are fixed)")
    assert not policy.auto_approves({**ROLLOUT, "steps": [{"action": "noop", "params": {}}]})
    assert source.broken == (str(folder / "commanders.cedar"),)
    assert source.problem is not None and "not Cedar" in source.problem

    (folder / "commanders.cedar").unlink()
    clock.now += 2
    assert policy.refusal(ALICE, "U0ERIN", ROLLOUT) is None
    assert (source.problem, source.broken, policy.cedar.version) == (None, (), first)


def test_a_bad_policy_at_start_is_refused(folder):
    write(folder / "bad.cedar", "permit (")
    with pytest.raises(PolicyError, match=r"bad\.cedar: not Cedar"):
        PolicySource(folder)
