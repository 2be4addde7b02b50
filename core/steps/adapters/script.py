"""``script.exec``: run an allow-listed executable with an argv (never a shell), a minimal
environment, bounded output, and the whole process group killed at the step's timeout.

A plan may set only environment variables on an allow-list: the locale and time zone, and what
the operator names in ``OPSGATE_SCRIPT_ENV_ALLOW``. Anything else (proxies, loader and
interpreter start-up variables, tool configuration) could change what runs or where it talks."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from core.outbound.allowlists import EnvAllowList, ExecutableAllowList
from core.steps.adapters.base import (
    Checked,
    StepContext,
    StepOutcome,
    StepRefused,
    parse_params,
)
from core.steps.adapters.process_step import command_line, process_outcome, start_failure
from core.steps.process import minimal_env, run_process
from core.steps.words import Sentence, Value, refused, sentence, validated

PLAN_ENV: tuple[str, ...] = ("LANG", "LC_*", "TZ")
"""Variables any plan may set; ``OPSGATE_SCRIPT_ENV_ALLOW`` adds the operator's."""

Arg = Annotated[str, StringConstraints(max_length=4096)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
EnvValue = Annotated[str, StringConstraints(max_length=4096)]


class ScriptParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    argv: list[Arg] = Field(min_length=1, max_length=64)
    cwd: str | None = Field(default=None, min_length=1, max_length=1024)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=32)

    @field_validator("argv")
    @classmethod
    def _plain_args(cls, argv: list[str]) -> list[str]:
        if not argv[0]:
            raise ValueError("argv[0] must name an executable")
        if any("\x00" in arg for arg in argv):
            raise ValueError("arguments may not contain NUL bytes")
        return argv

    @field_validator("cwd")
    @classmethod
    def _absolute_cwd(cls, cwd: str | None) -> str | None:
        if cwd is not None and (not os.path.isabs(cwd) or "\x00" in cwd):
            raise ValueError("cwd must be an absolute path")
        return cwd

    @field_validator("env")
    @classmethod
    def _plain_env(cls, env: dict[str, str]) -> dict[str, str]:
        if any("\x00" in value for value in env.values()):
            raise ValueError("values may not contain NUL bytes")
        return env


def describe(params: Mapping[str, Any]) -> Sentence:
    """The step in words: "Run `restart-service --graceful` in `/srv` with `TZ=UTC`"."""
    p = validated(ScriptParams, params)
    if not isinstance(p, ScriptParams):
        return refused("script.exec", p)
    env = " ".join(f"{name}={value}" for name, value in p.env.items())
    return sentence("Run ", Value(command_line(p.argv)),
                    *((" in ", Value(p.cwd)) if p.cwd else ()),
                    *((" with ", Value(env)) if env else ()))


class ScriptAdapter:
    action = "script.exec"

    def __init__(self, allowlist: ExecutableAllowList, output_limit: int,
                 grace_s: float = 2.0, env_allow: tuple[str, ...] = ()) -> None:
        self._allowlist = allowlist
        self._output_limit = output_limit
        self._grace_s = grace_s
        self._env_allow = EnvAllowList((*PLAN_ENV, *env_allow))

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        parsed, argv = self._resolved(params)
        label = f"{self.action} {command_line(parsed.argv)[:200]}"
        try:
            result = run_process(argv, timeout_s=ctx.timeout_s, output_limit=self._output_limit,
                                 env=minimal_env(parsed.env), cwd=parsed.cwd,
                                 grace_s=self._grace_s)
        except OSError as exc:
            return start_failure(argv, label, exc)
        return process_outcome(result, label)

    def dry_run(self, params: Mapping[str, Any]) -> Checked:
        """The argv that would run and the allow-list entry that admits it."""
        parsed, argv = self._resolved(params)
        entry = self._allowlist.entry(parsed.argv[0]) or parsed.argv[0]
        env = f" with {', '.join(sorted(parsed.env))} set" if parsed.env else ""
        return "ok", (f"would run {command_line(argv)[:300]}{env} (allow-list entry "
                      f"{entry!r})")

    def _resolved(self, params: Mapping[str, Any]) -> tuple[ScriptParams, list[str]]:
        """The params and the argv to run, or ``StepRefused`` (invalid, env or executable off
        its allow-list)."""
        parsed = parse_params(ScriptParams, params, self.action)
        refused = sorted(name for name in parsed.env if not self._env_allow.allows(name))
        if refused:
            raise StepRefused(
                f"{self.action}: a plan may not set {', '.join(refused)}: not on the environment "
                f"allow-list ({', '.join(self._env_allow.entries)}; OPSGATE_SCRIPT_ENV_ALLOW "
                "adds names)", action=self.action, variables=refused)
        executable = self._allowlist.resolve(parsed.argv[0])
        if executable is None:
            raise StepRefused(
                f"{self.action}: {parsed.argv[0]!r} is not on the script allow-list "
                "(OPSGATE_SCRIPT_ALLOWLIST)", action=self.action, executable=parsed.argv[0])
        return parsed, [executable, *parsed.argv[1:]]
