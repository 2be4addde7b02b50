"""script.exec against real processes: the allow-list, inert shell metacharacters, bounded
output, a minimal environment, and a hanging script's whole process group killed at its
timeout."""

from __future__ import annotations

import shutil
import textwrap
import time
from pathlib import Path

import pytest

from core.outbound.allowlists import ExecutableAllowList
from core.steps.adapters import StepContext, StepRefused
from core.steps.adapters.script import ScriptAdapter

ECHO = shutil.which("echo")
ENV = shutil.which("env")


def ctx(timeout_s: float = 5.0) -> StepContext:
    return StepContext.for_step("case-1", "plan-hash", 0, 1, timeout_s)


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def adapter(*allowed: str, output_limit: int = 4096) -> ScriptAdapter:
    return ScriptAdapter(ExecutableAllowList(allowed), output_limit, grace_s=0.3)


def alive(pid: int) -> bool:
    """A zombie waiting for PID 1 to reap it is not alive: it runs nothing."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_shell_metacharacters_are_passed_literally(tmp_path):
    marker = tmp_path / "x"
    text = f"$(touch {marker}); touch {marker}; `touch {marker}` && rm -rf ~ | tee {marker} *"
    outcome = adapter("echo").run({"argv": ["echo", text]}, ctx())
    assert outcome.ok, outcome.summary
    assert outcome.output == text + "\n"
    assert not marker.exists(), "a shell ran the argument"
    assert outcome.detail["argv"] == [ECHO, text]


def test_an_executable_off_the_allow_list_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    touch = script(tmp_path, "touch-marker", f"touch {marker}\n")
    for argv0 in ("sh", "/bin/sh", touch, "touch-marker"):
        with pytest.raises(StepRefused, match="not on the script allow-list"):
            adapter("echo").run({"argv": [argv0, "-c", f"touch {marker}"]}, ctx())
    assert not marker.exists()
    assert adapter(touch).run({"argv": [touch]}, ctx()).ok
    assert marker.exists(), "the same script runs once allow-listed"


def test_a_non_zero_exit_is_a_failed_outcome_not_an_exception(tmp_path):
    fail = script(tmp_path, "fail", "echo 'disk full' >&2\nexit 3\n")
    outcome = adapter(fail).run({"argv": [fail]}, ctx())
    assert not outcome.ok
    assert outcome.detail["exit_code"] == 3 and not outcome.detail["timed_out"]
    assert "exit 3" in outcome.summary
    assert outcome.output == "disk full\n", "stderr is captured with stdout"


def test_output_is_truncated_with_a_marker_keeping_head_and_tail(tmp_path):
    loud = script(tmp_path, "loud", "echo FIRST\nhead -c 200000 /dev/zero | tr '\\0' y\n"
                                    "echo\necho LAST\n")
    outcome = adapter(loud, output_limit=512).run({"argv": [loud]}, ctx())
    assert outcome.ok
    assert outcome.output.startswith("FIRST\n") and outcome.output.endswith("LAST\n")
    assert "bytes truncated]" in outcome.output
    assert len(outcome.output.encode()) < 600
    assert outcome.detail["output_bytes"] == 200_012


def test_the_environment_is_an_allow_list_plus_the_plans_allowed_variables(monkeypatch):
    for name, value in (("OPSGATE_API_TOKEN", "s3cret-token"),
                        ("AWS_SECRET_ACCESS_KEY", "s3cret-key"),
                        ("HTTPS_PROXY", "http://s3cret@proxy:3128"), ("KUBECONFIG", "/s3cret"),
                        ("GIT_SSH_COMMAND", "s3cret"), ("PYTHONUSERBASE", "/s3cret"),
                        ("GLIBC_TUNABLES", "s3cret"), ("LC_TIME", "C"), ("HOME", "/home/ops")):
        monkeypatch.setenv(name, value)
    runner = ScriptAdapter(ExecutableAllowList(["env"]), 4096, env_allow=("DRAIN_SECONDS",))
    outcome = runner.run({"argv": ["env"], "env": {"DRAIN_SECONDS": "30", "TZ": "UTC"}}, ctx())
    assert outcome.ok
    lines = outcome.output.splitlines()
    names = {line.split("=", 1)[0] for line in lines}
    assert "s3cret" not in outcome.output
    assert {"DRAIN_SECONDS=30", "TZ=UTC", "LC_TIME=C", "HOME=/home/ops"} <= set(lines)
    assert names <= {"PATH", "HOME", "LANG", "TZ", "DRAIN_SECONDS"} | {
        name for name in names if name.startswith("LC_")}
    assert "PATH" in names


def test_a_variable_off_the_allow_list_refuses_the_step_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    touch = script(tmp_path, "touch.sh", f'touch "{marker}"\n')
    with pytest.raises(StepRefused, match="HTTPS_PROXY: not on the environment allow-list"):
        adapter(touch).run({"argv": [touch], "env": {"HTTPS_PROXY": "http://evil:3128"}},
                           ctx())
    assert not marker.exists()


def test_cwd_is_where_the_process_runs_and_a_missing_one_fails_the_step(tmp_path):
    pwd = shutil.which("pwd") or "/bin/pwd"
    outcome = adapter(pwd).run({"argv": [pwd], "cwd": str(tmp_path)}, ctx())
    assert outcome.ok and outcome.output.strip() == str(tmp_path)
    missing = adapter(pwd).run({"argv": [pwd], "cwd": str(tmp_path / "gone")}, ctx())
    assert not missing.ok and "could not start" in missing.summary


def test_a_hanging_script_and_its_child_are_killed_at_the_timeout(tmp_path):
    pids = tmp_path / "pids"
    hang = script(tmp_path, "hang", f"""\
        sleep 60 &
        echo "$$ $!" > {pids}
        echo started
        sleep 60
        """)
    started = time.monotonic()
    outcome = adapter(hang).run({"argv": [hang]}, ctx(timeout_s=1.0))
    elapsed = time.monotonic() - started
    parent, child = map(int, pids.read_text().split())
    assert not outcome.ok and outcome.detail["timed_out"]
    assert "timeout" in outcome.summary and outcome.output == "started\n"
    assert 1.0 <= elapsed < 10, "killed at the timeout, not at the end of the sleep"
    assert not alive(parent) and not alive(child)


def test_a_script_ignoring_sigterm_is_killed_after_the_grace(tmp_path):
    pids = tmp_path / "pids"
    stubborn = script(tmp_path, "stubborn", f"""\
        trap '' TERM
        sleep 60 &
        echo "$$ $!" > {pids}
        sleep 60
        """)
    outcome = adapter(stubborn).run({"argv": [stubborn]}, ctx(timeout_s=0.5))
    parent, child = map(int, pids.read_text().split())
    assert not outcome.ok and outcome.detail["timed_out"]
    assert outcome.detail["exit_code"] == -9, "SIGKILL after SIGTERM was ignored"
    assert not alive(parent) and not alive(child)


def test_children_left_behind_by_a_finished_script_are_ended(tmp_path):
    pids = tmp_path / "pids"
    leaves = script(tmp_path, "leaves", f"""\
        sleep 60 > /dev/null 2>&1 &
        echo "$!" > {pids}
        echo done
        """)
    outcome = adapter(leaves).run({"argv": [leaves]}, ctx())
    assert outcome.ok and outcome.output == "done\n"
    assert not alive(int(pids.read_text()))
