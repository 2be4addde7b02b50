"""The allow-lists every adapter checks before anything runs: which executables script.exec may
start, which environment variables reach it, and which URLs http.request and verify probes may
call. All fail closed: empty allows nothing, and an entry that cannot be understood allows
nothing. An entry may name the component it acts on, ``payments-api=https://pay.example/admin/``:
the approval policy reads it (``core.policy.targets``), the allow-list the entry."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import httpx

from core.policy.targets import owned_entry

log = logging.getLogger(__name__)

_DEFAULT_PORTS = {"http": 80, "https": 443}


def resolve_executable(entry: str) -> str | None:
    """``entry`` as an absolute path to an executable file: a bare name is looked up on PATH,
    an absolute path is checked; anything else (relative paths) resolves to nothing."""
    if os.path.isabs(entry):
        path = entry
    elif os.sep in entry:
        return None
    else:
        path = shutil.which(entry) or ""
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


class ExecutableAllowList:
    """Executables resolved once, when the adapter is built; ``argv[0]`` must name one of them."""

    def __init__(self, entries: Iterable[str]) -> None:
        self._by_name: dict[str, str] = {}
        self._by_real: dict[str, str] = {}
        self._entries: dict[str, str] = {}  # a resolved path → the entry that named it
        for written in entries:
            entry = owned_entry(written)[1]  # ``component=entry``: the policy reads the component
            path = resolve_executable(entry)
            if path is None:
                log.warning("script allow-list entry %r is not an executable; ignored", entry)
                continue
            self._by_name[entry] = path
            self._by_real[os.path.realpath(path)] = path
            self._entries.setdefault(path, entry)

    def resolve(self, argv0: str) -> str | None:
        """The path to run for ``argv0``: a name exactly as allow-listed, or an absolute path to
        the same file as an allow-listed entry. ``None``: not allowed."""
        if argv0 in self._by_name:
            return self._by_name[argv0]
        if os.path.isabs(argv0):
            return self._by_real.get(os.path.realpath(argv0))
        return None

    def entry(self, argv0: str) -> str | None:
        """The allow-list entry that admits ``argv0`` (as the operator wrote it); None: none."""
        path = self.resolve(argv0)
        return None if path is None else self._entries.get(path, argv0)

    def __bool__(self) -> bool:
        return bool(self._by_name)


class EnvAllowList:
    """Environment variable names: exact (``TZ``) or a prefix ending in ``*`` (``LC_*``).
    Names are case-sensitive, as the kernel passes them."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(entries)
        self._names = frozenset(e for e in self.entries if not e.endswith("*"))
        self._prefixes = tuple(e[:-1] for e in self.entries if e.endswith("*") and len(e) > 1)

    def allows(self, name: str) -> bool:
        return name in self._names or name.startswith(self._prefixes)

    def pick(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The allowed variables of ``environ``."""
        return {name: value for name, value in environ.items() if self.allows(name)}


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: httpx.URL) -> Origin:
        return cls(url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme, 0))


def url_problem(url: httpx.URL) -> str | None:
    """Why ``url`` can never be allowed, whatever the list says; ``None`` when it is plain."""
    if url.scheme not in _DEFAULT_PORTS or not url.host:
        return "only absolute http:// and https:// URLs are allowed"
    if url.userinfo:
        return "credentials in the URL are not allowed"
    for segment in url.raw_path.split(b"?")[0].split(b"/"):
        decoded = unquote(segment.decode("ascii", errors="replace"))
        # A server may decode %2e%2e or %2f after our prefix check: refuse them up front.
        if decoded in (".", "..") or "/" in decoded or "\\" in decoded:
            return "dot segments and encoded slashes in the path are not allowed"
    return None


@dataclass(frozen=True)
class _Prefix:
    origin: Origin
    path: str

    def covers(self, url: httpx.URL) -> bool:
        if Origin.of(url) != self.origin:
            return False
        if self.path.endswith("/"):
            return url.path.startswith(self.path)
        return url.path == self.path or url.path.startswith(self.path + "/")


class UrlAllowList:
    """URL prefixes: same scheme, host and port, and a path under the prefix's path (on a
    segment boundary, so ``/api`` never admits ``/apifoo``)."""

    def __init__(self, prefixes: Iterable[str]) -> None:
        self._prefixes: list[_Prefix] = []
        for written in prefixes:
            prefix = owned_entry(written)[1]  # ``component=prefix``: the policy reads the component
            parsed = _parse_prefix(prefix)
            if parsed is None:
                log.warning("http allow-list entry %r is not a URL prefix; ignored", prefix)
            else:
                self._prefixes.append(parsed)

    def allows(self, url: httpx.URL) -> bool:
        return url_problem(url) is None and any(p.covers(url) for p in self._prefixes)

    def __bool__(self) -> bool:
        return bool(self._prefixes)


def _parse_prefix(prefix: str) -> _Prefix | None:
    try:
        url = httpx.URL(prefix)
    except httpx.InvalidURL:
        return None
    if url_problem(url) is not None or url.query or url.fragment:
        return None
    return _Prefix(Origin.of(url), url.path or "/")
