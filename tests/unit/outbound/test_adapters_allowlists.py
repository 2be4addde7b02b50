"""The allow-lists: what an entry admits, and that anything unclear admits nothing."""

from __future__ import annotations

import os

import httpx
import pytest

from core.outbound.allowlists import ExecutableAllowList, UrlAllowList


@pytest.fixture
def tool(tmp_path):
    path = tmp_path / "restart-service"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def test_an_executable_is_allowed_by_its_path_or_its_listed_name(tool, tmp_path):
    link = tmp_path / "alias"
    link.symlink_to(tool)
    allow = ExecutableAllowList([tool, "sh"])
    assert allow.resolve(tool) == tool
    assert allow.resolve(str(link)) == tool, "the same file by another path"
    sh = allow.resolve("sh")
    assert sh is not None and os.path.isabs(sh)
    assert allow.resolve("restart-service") is None, "a bare name only when listed by name"
    assert allow.resolve("bash") is None
    assert allow.resolve("./restart-service") is None


def test_entries_that_cannot_be_resolved_allow_nothing(tmp_path):
    plain = tmp_path / "not-executable"
    plain.write_text("echo hi\n")
    allow = ExecutableAllowList([str(plain), "no-such-tool-anywhere", "relative/tool", ""])
    assert not allow
    assert allow.resolve(str(plain)) is None
    assert allow.resolve("no-such-tool-anywhere") is None


@pytest.mark.parametrize(("url", "allowed"), [
    ("http://127.0.0.1:8081/", True),
    ("http://127.0.0.1:8081/deep/path?x=1", True),
    ("http://127.0.0.1:8082/", False),
    ("https://api.example.com/v1/orders", True),
    ("https://api.example.com:443/v1/orders/7", True),
    ("https://api.example.com/v1", True),
    ("https://api.example.com/v10", False),
    ("https://api.example.com/v2/orders", False),
    ("http://api.example.com/v1/orders", False),
    ("https://API.example.com/v1/x", True),
])
def test_url_prefixes_match_origin_and_path_segments(url, allowed):
    allow = UrlAllowList(["http://127.0.0.1:8081/", "https://api.example.com/v1"])
    assert allow.allows(httpx.URL(url)) is allowed


def test_unusable_prefixes_allow_nothing():
    allow = UrlAllowList(["127.0.0.1:8081", "file:///", "http://u:p@127.0.0.1/",
                          "http://127.0.0.1/?q=1", ""])
    assert not allow
    assert not allow.allows(httpx.URL("http://127.0.0.1/"))
