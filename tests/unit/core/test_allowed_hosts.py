"""``core.allowed_hosts``: which names a request may give in ``Host`` and ``Origin``, the form of
``OPSGATE_ALLOWED_HOSTS``, and when ``opsgate serve`` needs it (issue 24, finding 5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.allowed_hosts import AllowedHosts, allowed_hosts, host_names, is_loopback
from core.settings import InvalidSettings, Settings, load_settings

DEFAULT = AllowedHosts.of([])
NAMED = AllowedHosts.of(["opsgate.example.com", "10.0.0.5:8080", "[2001:db8::1]:443"])


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LOCALHOST:1", "localhost.",
                                  "127.0.0.1", "127.0.0.1:55123", "[::1]", "[::1]:8080",
                                  "[0:0:0:0:0:0:0:1]:8080"])
def test_the_loopback_names_are_allowed_on_any_port(host: str) -> None:
    assert DEFAULT.admits_host(host, "http")


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "localhost.evil.example",
                                  "127.0.0.1.nip.io", "127.0.0.2", "0.0.0.0", "", " ",
                                  "localhost:0", "localhost:99999", "localhost:x",
                                  "user@localhost", "localhost/x", "[::1", "[::2]", "*"])
def test_any_other_host_is_refused(host: str) -> None:
    assert not DEFAULT.admits_host(host, "http")


@pytest.mark.parametrize(("host", "scheme", "admitted"), [
    ("opsgate.example.com", "https", True),
    ("OpsGate.Example.COM:9999", "http", True),  # no port named: any port
    ("10.0.0.5:8080", "http", True),
    ("10.0.0.5:8081", "http", False),
    ("10.0.0.5", "http", False),  # port 80, not 8080
    ("[2001:db8::1]", "https", True),  # the default port of https is 443
    ("[2001:db8::1]", "http", False),
    ("[2001:0db8:0:0:0:0:0:1]:443", "http", True),
    ("example.com", "http", False),
])
def test_configured_names_and_ports(host: str, scheme: str, admitted: bool) -> None:
    assert NAMED.admits_host(host, scheme) is admitted


@pytest.mark.parametrize(("origin", "admitted"), [
    ("http://localhost:3000", True),
    ("https://127.0.0.1", True),
    ("http://[::1]:8080", True),
    ("https://opsgate.example.com", True),
    ("http://10.0.0.5:8080", True),
    ("http://10.0.0.5", False),
    ("http://evil.example", False),
    ("null", False),
    ("file://", False),
    ("chrome-extension://abcdef", False),
    ("http://localhost:3000/path", False),
    ("http://user@localhost", False),
    ("", False),
])
def test_origins(origin: str, admitted: bool) -> None:
    assert NAMED.admits_origin(origin) is admitted


@given(st.from_regex(r"[a-z0-9-]{1,20}(\.[a-z0-9-]{1,20}){0,3}(:[0-9]{1,5})?", fullmatch=True))
def test_by_default_only_a_loopback_name_is_ever_admitted(host: str) -> None:
    name = host.partition(":")[0]
    if DEFAULT.admits_host(host, "http"):
        assert name in ("localhost", "127.0.0.1")
    if DEFAULT.admits_origin(f"http://{host}"):
        assert name in ("localhost", "127.0.0.1")


def test_entries_are_kept_as_compared() -> None:
    assert host_names(["Ops.Example.com.", "10.0.0.5:8080", "::1", "[2001:DB8::1]:443"]) == [
        "ops.example.com", "10.0.0.5:8080", "[::1]", "[2001:db8::1]:443"]


@pytest.mark.parametrize("value", ["[::1]:8080, opsgate.example.com",
                                   '["[::1]:8080", "opsgate.example.com"]'])
def test_the_environment_gives_a_list_or_names_separated_by_commas(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPSGATE_ALLOWED_HOSTS", value)
    assert load_settings(_env_file=None).allowed_hosts == ["[::1]:8080", "opsgate.example.com"]


@pytest.mark.parametrize(("value", "why"), [
    ("https://opsgate.example.com", "is not a host name (no scheme, path or user"),
    ("opsgate.example.com/api", "is not a host name (no scheme, path or user"),
    ("*", "is not a host name or address"),
    ("opsgate.example.com:http", "has no port from 1 to 65535"),
    ("[::1", "has no closing ']'"),
    ('["opsgate.example.com", "[::1]:x"]', "has no port from 1 to 65535"),
])
def test_a_wrong_entry_is_one_line_naming_the_setting(monkeypatch: pytest.MonkeyPatch,
                                                      value: str, why: str) -> None:
    monkeypatch.setenv("OPSGATE_ALLOWED_HOSTS", value)
    with pytest.raises(InvalidSettings) as bad:
        load_settings(_env_file=None)
    (problem,) = bad.value.problems
    assert problem.startswith("OPSGATE_ALLOWED_HOSTS=") and why in problem
    assert "\n" not in problem


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_bound_to_loopback_the_loopback_names_are_the_default(bind: str) -> None:
    assert is_loopback(bind)
    assert allowed_hosts(Settings(_env_file=None), bind) == DEFAULT


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "10.0.0.5", "opsgate.example.com"])
def test_bound_elsewhere_the_setting_is_required(bind: str) -> None:
    with pytest.raises(InvalidSettings) as missing:
        allowed_hosts(Settings(_env_file=None), bind)
    (problem,) = missing.value.problems
    assert problem.startswith(f"OPSGATE_ALLOWED_HOSTS is not set: opsgate serve binds {bind}")

    named = allowed_hosts(Settings(_env_file=None, allowed_hosts=["opsgate.example.com"]), bind)
    assert named.admits_host("opsgate.example.com", "https")
    assert named.admits_host("localhost:8080", "http")
