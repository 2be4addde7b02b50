"""Which names a request may give this server in its ``Host`` (and ``Origin``, when it sends one):
``OPSGATE_ALLOWED_HOSTS``, plus the loopback names, which are always allowed. A web page whose
name resolves to this server (DNS rebinding) sends its own name in both, so it is refused; a
person's browser, a proxy or a client reaching the server by an allowed name is not.

An entry is a host name, an IPv4 address or a bracketed IPv6 address, with an optional port:
without one, any port is allowed. Pure: parsing and matching only (``core.api.hosts`` refuses
the requests).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from core.settings_errors import InvalidSettings

if TYPE_CHECKING:
    from core.settings import Settings

SETTING = "OPSGATE_ALLOWED_HOSTS"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")


@dataclass(frozen=True)
class HostPort:
    """A host as compared: lower case, no trailing dot, IPv6 bracketed and compressed."""

    name: str
    port: int | None = None

    def __str__(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


def host_port(text: str) -> HostPort:
    """``text`` (``name``, ``name:port``, ``[v6]`` or ``[v6]:port``) as a ``HostPort``;
    ``ValueError`` saying what is wrong."""
    text = text.strip().lower()
    if not text:
        raise ValueError("an empty host name")
    if "://" in text or "/" in text or "@" in text:
        raise ValueError(f"{text!r} is not a host name (no scheme, path or user: "
                         "opsgate.example.com or opsgate.example.com:8443)")
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise ValueError(f"{text!r} has no closing ']'")
        return HostPort(_ipv6(inside, text), _port(rest.removeprefix(":"), text)
                        if rest else None)
    if text.count(":") > 1:  # an IPv6 address without brackets: no port can follow
        return HostPort(_ipv6(text, text))
    name, colon, port = text.partition(":")
    name = name.removesuffix(".")
    if not _NAME.fullmatch(name) or len(name) > 253:
        raise ValueError(f"{text!r} is not a host name or address")
    return HostPort(name, _port(port, text) if colon else None)


def _ipv6(address: str, text: str) -> str:
    try:
        return f"[{ipaddress.IPv6Address(address).compressed}]"
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv6 address") from None


def _port(port: str, text: str) -> int:
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r} has no port from 1 to 65535 after ':'")
    return int(port)


def host_names(names: Sequence[str]) -> list[str]:
    """The entries of ``OPSGATE_ALLOWED_HOSTS`` as compared (each checked: ``ValueError``)."""
    return [str(host_port(name)) for name in names]


@dataclass(frozen=True)
class AllowedHosts:
    """The names this server answers to; see the module's docstring."""

    entries: tuple[HostPort, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> AllowedHosts:
        """The loopback names and ``names`` (already checked, ``host_names``)."""
        return cls(tuple(dict.fromkeys(host_port(name) for name in (*LOOPBACK_NAMES, *names))))

    def admits_host(self, header: str, scheme: str) -> bool:
        """Whether a ``Host`` header names this server (a request over ``scheme``)."""
        try:
            given = host_port(header)
        except ValueError:
            return False
        return self._admits(given, DEFAULT_PORTS.get(scheme))

    def admits_origin(self, header: str) -> bool:
        """Whether an ``Origin`` header is a page served under a name of this server (``null``,
        another scheme than http(s), a path or credentials are not)."""
        try:
            parts = urlsplit(header.strip())
            if parts.scheme not in ("http", "https") or parts.path or parts.query \
                    or parts.fragment:
                return False
            given = host_port(parts.netloc)
        except ValueError:
            return False
        return self._admits(given, DEFAULT_PORTS[parts.scheme])

    def _admits(self, given: HostPort, default_port: int | None) -> bool:
        port = given.port if given.port is not None else default_port
        return any(entry.name == given.name and (entry.port is None or entry.port == port)
                   for entry in self.entries)

    def __str__(self) -> str:
        return ", ".join(map(str, self.entries))


def is_loopback(bind: str) -> bool:
    """Whether the address ``opsgate serve`` binds is reachable from this machine only."""
    name = bind.strip().lower().removeprefix("[").removesuffix("]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_hosts(settings: Settings, bound_to: str | None = None) -> AllowedHosts:
    """The names a server of ``settings`` answers to. Bound to an address other than loopback,
    ``OPSGATE_ALLOWED_HOSTS`` is required: without it only the loopback names would be allowed,
    and no client elsewhere could reach the server by its name (``InvalidSettings``, one line)."""
    if not settings.allowed_hosts and bound_to is not None and not is_loopback(bound_to):
        raise InvalidSettings([
            f"{SETTING} is not set: opsgate serve binds {bound_to}, not loopback, so name the "
            f"host names clients reach it by (its Host header), e.g. {SETTING}="
            "opsgate.example.com,opsgate.internal:8080"])
    return AllowedHosts.of(settings.allowed_hosts)
