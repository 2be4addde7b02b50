"""Settings of every opsgate process, read from ``OPSGATE_*`` environment variables (and ``.env``).

Core's ``Settings`` gathers one group per feature (``serving``, ``changes``, ``evidence``,
``loop``); the outer layers declare their own (``bot.settings``, ``agent.settings``), contribute
them through ``Extensions.settings`` and read them with ``Settings.layer``. Secrets come only from
the environment and are ``SecretStr`` so they never print. A list is JSON or comma-separated
(``U1,U2``); an object is JSON. A mistake is an ``InvalidSettings`` whose problems each fit on one
line: the variable, what is wrong, and what was expected (``core.settings_errors``);
``load_settings`` is the one place that reads. An ``OPSGATE_*`` variable no settings class reads
is a mistake too (``unknown_settings``: a typo must not leave its setting at the default), in the
environment and in ``.env`` alike (``env_file_names``), except the test suite's own
``OPSGATE_TEST_*``. Settings that hold Slack ids are checked for the id's shape (``U…`` for a
person, ``C…`` for a channel: ``core.settings.forms``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, PrivateAttr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from core.settings.changes import (
    ExecutorSettings,
    GateSettings,
    GatewaySettings,
    approver_problems,
)
from core.settings.evidence import (
    AnalysisSettings,
    EmbeddingSettings,
    MetricsSettings,
    VerifySettings,
)
from core.settings.investigate import InvestigationSettings
from core.settings.loop import LoopSettings
from core.settings.serving import McpSettings, OperationsSettings, ServingSettings
from core.settings_errors import InvalidSettings, invalid_settings

__all__ = [
    "PLACEHOLDER",
    "TEST_PREFIX",
    "InvalidSettings",
    "OpsgateSettings",
    "Settings",
    "env_file_names",
    "load_settings",
    "placeholders",
    "read_settings",
    "unknown_settings",
]

PLACEHOLDER = "CHANGE-ME"
"""What the deploy files (compose.yaml, deploy/kubernetes) put where a first deploy must name its
own value: a process refuses to start while any setting still holds it."""
READ_PREFIXES = ("OPSGATE_", "SLACK_", "OPENAI_")
"""The environment variables opsgate's settings read."""
PREFIX = "OPSGATE_"
"""What every variable of opsgate's own settings begins with: one that no class reads is a typo."""
ENV_FILE = ".env"
"""The file every settings class reads beside the environment (in the working folder), which
the environment overrides."""
TEST_PREFIX = "OPSGATE_TEST_"
"""The test suite's own variables (its peers' binaries, its servers, its shuffle seed): no setting
begins so, opsgate never reads them, and they are never refused."""


class OpsgateSettings(BaseSettings):
    """What every opsgate settings class reads, core's and the outer layers' alike."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, env_file=ENV_FILE, extra="ignore",
                                      allow_inf_nan=False)


Layer = TypeVar("Layer", bound=OpsgateSettings)


class Settings(ServingSettings, GateSettings, GatewaySettings, ExecutorSettings,
               MetricsSettings, VerifySettings, AnalysisSettings, EmbeddingSettings, LoopSettings,
               OperationsSettings, McpSettings, InvestigationSettings, OpsgateSettings):
    """Core's settings, and the outer layers' read beside them (``layer``)."""

    _layers: dict[type[OpsgateSettings], OpsgateSettings] = PrivateAttr(default_factory=dict)

    @property
    def bus_kind(self) -> Literal["jetstream", "redis-streams", "in-process"]:
        """Which bus carries the loop: OPSGATE_BUS_URL (JetStream) over OPSGATE_REDIS_URL."""
        if self.bus_url:
            return "jetstream"
        return "redis-streams" if self.redis_url else "in-process"

    def layer(self, kind: type[Layer]) -> Layer:
        """An outer layer's own settings (the bot's Slack, the agent's model): those read or
        given with these, else read from the environment now."""
        found = self._layers.get(kind)
        if not isinstance(found, kind):
            found = self._layers[kind] = read_settings(kind)
        return found

    def with_layers(self, *layers: OpsgateSettings) -> Settings:
        """A copy of these settings carrying ``layers`` (what the demo and tests name)."""
        copy = self.model_copy()
        copy._layers = {**self._layers, **{type(layer): layer for layer in layers}}
        return copy


def read_settings(kind: type[Layer], **overrides: Any) -> Layer:
    """One settings class from the environment and ``overrides`` (what the command line named:
    None is not named); a mistake raises ``InvalidSettings``, one readable line per problem."""
    try:
        return kind(**{name: value for name, value in overrides.items() if value is not None})
    except (ValidationError, SettingsError) as exc:
        raise invalid_settings(kind, exc) from None


def load_settings(*layers: type[OpsgateSettings], **overrides: Any) -> Settings:
    """Settings from the environment, with the outer layers' ``layers`` read beside them
    (``overrides``: what the command line named, each to the class declaring it); the one place
    that reads it. Every mistake of every class raises one ``InvalidSettings``."""
    left = placeholders(os.environ)
    if left:
        raise InvalidSettings(left)
    theirs = {name for kind in layers for name in kind.model_fields}
    problems: list[str] = []
    settings = _read(Settings, {name: value for name, value in overrides.items()
                                if name not in theirs}, problems)
    read = [_read(kind, {name: value for name, value in overrides.items()
                         if name in kind.model_fields}, problems) for kind in layers]
    if settings is not None and "approvers" not in overrides:  # as the environment names them
        problems.extend(approver_problems(settings.approvers))
    if problems or settings is None:
        raise InvalidSettings(problems)
    return settings.with_layers(*(layer for layer in read if layer is not None))


def placeholders(environ: Mapping[str, str]) -> list[str]:
    """One line for each setting of ``environ`` still holding the deploy files' placeholder
    (its value is never shown: it may hold a secret around the placeholder)."""
    return [f"{name}: still the placeholder {PLACEHOLDER} of the deploy files; set it to your "
            "own value (docs/deploy.md)"
            for name, value in sorted(environ.items())
            if name.startswith(READ_PREFIXES) and PLACEHOLDER in value]


def unknown_settings(environ: Iterable[str], *layers: type[OpsgateSettings],
                     env_file: Iterable[str] = ()) -> list[str]:
    """One line for each ``OPSGATE_*`` name of ``environ`` (then of ``env_file``: the names
    ``.env`` sets, see ``env_file_names``) that neither core's settings nor the outer ``layers``
    read, naming the closest one that is (``OPSGATE_APROVERS: no such setting; did you mean
    OPSGATE_APPROVERS?``, ``OPSGATE_APROVERS in .env: …``); the tests' ``OPSGATE_TEST_*`` are
    not settings."""
    kinds: tuple[type[OpsgateSettings], ...] = (Settings, *layers)
    known = {name for kind in kinds for name in variable_names(kind)}
    by_stem = {name.removeprefix(PREFIX): name for name in known}  # SLACK_BOT_TOKEN has none
    environ = sorted(environ)
    in_environ = {name.upper() for name in environ}
    from_file = sorted(name for name in env_file if name.upper() not in in_environ)
    lines = []
    for name, where in [*((name, "") for name in environ),
                        *((name, f" in {ENV_FILE}") for name in from_file)]:
        upper = name.upper()  # the settings read the environment case-insensitively
        if not upper.startswith(PREFIX) or upper.startswith(TEST_PREFIX) or upper in known:
            continue
        closest = difflib.get_close_matches(upper[len(PREFIX):], sorted(by_stem), n=1,
                                            cutoff=0.7)
        hint = (f"did you mean {by_stem[closest[0]]}?" if closest
                else "docs/operations.md lists every setting")
        lines.append(f"{name}{where}: no such setting; {hint}")
    return lines


def env_file_names(folder: Path | None = None) -> list[str]:
    """The variable names the ``.env`` file of ``folder`` (the working folder) sets, which the
    settings read as they read the environment; none when there is no such file."""
    path = (folder or Path.cwd()) / ENV_FILE
    if not path.is_file():
        return []
    from dotenv import dotenv_values

    return list(dotenv_values(path, encoding="utf-8"))


def variable_names(kind: type[BaseModel]) -> set[str]:
    """The environment variables ``kind``'s fields are read from, in upper case."""
    prefix = str(kind.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field, info in kind.model_fields.items():
        alias = info.validation_alias  # an alias is read as named, without the prefix
        if isinstance(alias, AliasChoices):
            names.update(str(choice).upper() for choice in alias.choices)
        else:
            names.add(str(alias).upper() if alias else f"{prefix}{field}".upper())
    return names


def _read(kind: type[Layer], overrides: Mapping[str, Any], problems: list[str]) -> Layer | None:
    try:
        return read_settings(kind, **overrides)
    except InvalidSettings as bad:
        problems.extend(bad.problems)
        return None
