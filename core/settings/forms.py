"""The forms a setting's value takes in the environment, with their validators: lists as JSON or
comma-separated names, objects as JSON, http(s) and nats URLs, host names, the variable names a
script may be given and Slack channel ids. Each names its form for people (``Expect``) for the
one-line mistakes."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator
from pydantic_settings import NoDecode

from core.allowed_hosts import host_names
from core.settings_errors import Expect

__all__ = ["BusUrl", "DirectoryEntries", "EnvNames", "HostNames", "HttpUrl", "Names",
           "ObjectOfNumbers", "ObjectOfObjects", "SlackChannelId"]


def _list_from_text(value: Any) -> Any:
    """A list setting from the environment: a JSON list, or names separated by commas."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not a JSON list ({exc})") from exc
    return [item.strip() for item in text.split(",") if item.strip()]


def _object_from_text(value: Any) -> Any:
    """An object setting from the environment: JSON."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from exc


def _http_url(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an absolute http:// or https:// URL")
    return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
# What no allow-list may admit: these change which code runs, not what it is told.
_NEVER_NAMES = ("PATH", "IFS", "ENV", "BASH_ENV", "GCONV_PATH", "GLIBC_TUNABLES")
_NEVER_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")


def _env_names(names: list[str]) -> list[str]:
    for name in names:
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not a variable name (or a prefix ending in *)")
        if _admits_loader_variables(name):
            raise ValueError(f"{name} would let a plan change which code a script runs")
    return names


def _admits_loader_variables(entry: str) -> bool:
    if not entry.endswith("*"):
        return entry in _NEVER_NAMES or entry.startswith(_NEVER_PREFIXES)
    prefix = entry[:-1]
    return prefix.startswith(_NEVER_PREFIXES) or any(
        never.startswith(prefix) for never in (*_NEVER_NAMES, *_NEVER_PREFIXES))


Names = Annotated[list[str], NoDecode, BeforeValidator(_list_from_text),
                  Expect("names separated by commas (a,b) or a JSON list ([\"a\", \"b\"])")]
HttpUrl = Annotated[str, AfterValidator(_http_url), Expect("an http:// or https:// URL")]


def _nats_urls(value: str | None) -> str | None:
    """The NATS servers of the bus: ``nats://`` or ``tls://`` URLs separated by commas."""
    if value is None:
        return None
    urls = [url.strip() for url in value.split(",") if url.strip()]
    if not urls:
        raise ValueError("no server named")
    for url in urls:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError as exc:
            raise ValueError(f"{url!r} is not a URL ({exc})") from exc
        if parts.scheme not in ("nats", "tls") or not parts.hostname:
            raise ValueError(f"{url!r} is not a nats:// or tls:// URL with a host")
    return ",".join(urls)


BusUrl = Annotated[str, AfterValidator(_nats_urls), Expect(
    "nats:// URLs of a NATS JetStream server or cluster, separated by commas "
    "(nats://10.0.0.1:4222,nats://10.0.0.2:4222)")]
def _hosts_from_text(value: Any) -> Any:
    """Host names from the environment: a JSON list, or names separated by commas, where a
    bracketed IPv6 address (``[::1]:8080``) is a name, not a JSON list."""
    if isinstance(value, str) and value.strip().startswith("[") \
            and not re.match(r"\[\s*[\"\]]", value.strip()):
        return [item.strip() for item in value.split(",") if item.strip()]
    return _list_from_text(value)


HostNames = Annotated[list[str], NoDecode, BeforeValidator(_hosts_from_text),
                      AfterValidator(host_names), Expect(
    "host names with optional ports, separated by commas (opsgate.example.com,10.0.0.5:8080) "
    "or a JSON list")]
ObjectOfNumbers = Annotated[
    dict[str, float], NoDecode, BeforeValidator(_object_from_text),
    Expect('a JSON object of names and numbers, e.g. {"error_rate": 0.01}')]
ObjectOfObjects = Annotated[
    dict[str, dict[str, Any]], NoDecode, BeforeValidator(_object_from_text),
    Expect('a JSON object of names and objects, e.g. {"m": {"query": "…", "kind": "level"}}')]
def _directory(entries: list[str]) -> list[str]:
    """Where group membership is read (core.catalog.directory): each entry ``slack``,
    ``catalog`` or ``catalog:PATH`` inside the catalog's folder."""
    from core.catalog.directory import Directory

    Directory.parse(entries)  # ValueError saying which entry and why
    return entries


DirectoryEntries = Annotated[Names, AfterValidator(_directory), Expect(
    "slack, catalog, or catalog:PATH (a file or folder inside OPSGATE_CATALOG), separated by "
    "commas (slack,catalog:org)")]
EnvNames = Annotated[Names, AfterValidator(_env_names), Expect(
    "variable names or prefixes ending in *, separated by commas (A,B_*) or a JSON list")]


SLACK_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{2,}")
"""A Slack channel id: ``C…`` (a channel), ``G…`` (a private channel of older workspaces)."""


def _slack_channel(value: str | None) -> str | None:
    if value is None or SLACK_CHANNEL_ID.fullmatch(value):
        return value
    if value.startswith("#") or value == value.lower():
        raise ValueError("a channel's name, not its id")
    raise ValueError("not a Slack channel id")


SlackChannelId = Annotated[str, AfterValidator(_slack_channel), Expect(
    "a Slack channel id, C… or G… (C012AB3CD: the bottom of the channel's details in Slack)")]
