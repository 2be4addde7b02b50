"""A running service's catalog: an edited file is picked up without a restart (once the check
interval passed), a bad edit keeps the last good catalog with its problem shown and logged once,
and a good edit clears it; a bad catalog at start is refused."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from core.catalog import EMPTY_CATALOG, CatalogError, CatalogSource

GROUP = """\
apiVersion: backstage.io/v1alpha1
kind: Group
metadata: {name: payments-oncall}
spec: {type: team, children: [], members: []}
"""
COMPONENT = """\
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: %s}
spec: {owner: payments-oncall, lifecycle: production}
"""
USER = """\
apiVersion: backstage.io/v1alpha1
kind: User
metadata: {name: %s, annotations: {slack.com/user-id: %s}}
spec: {memberOf: %s}
"""


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> None:
    """Write ``text`` with a modification time after the last one, whatever the file system's
    time resolution (two writes in the same tick would otherwise look alike)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    later = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(later, later))


def catalog_with(*components: str) -> str:
    return GROUP + "".join(COMPONENT % name for name in components)


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog-info.yaml"
    write(path, catalog_with("payments-api"))
    return path


def test_an_edited_file_is_read_again_once_the_interval_passed(file):
    clock = Clock()
    source = CatalogSource(file, check_every_s=2.0, clock=clock)
    first = source.current()
    assert list(first.components) == ["payments-api"]
    write(file, catalog_with("payments-api", "search-api"))
    clock.now += 1.0
    assert source.current() is first  # not looked at yet
    clock.now += 1.0
    assert list(source.current().components) == ["payments-api", "search-api"]
    assert source.current().version != first.version
    assert source.problem is None


def test_an_unchanged_file_is_not_read_again(file):
    clock = Clock()
    source = CatalogSource(file, check_every_s=2.0, clock=clock)
    first = source.current()
    clock.now += 60
    assert source.current() is first


def test_a_folder_picks_up_a_new_file(tmp_path):
    write(tmp_path / "groups.yaml", GROUP)
    clock = Clock()
    source = CatalogSource(tmp_path, check_every_s=2.0, clock=clock)
    assert list(source.current().groups) == ["payments-oncall"]
    write(tmp_path / "payments.yaml", COMPONENT % "payments-api")
    clock.now += 2
    assert list(source.current().components) == ["payments-api"]


def test_a_bad_edit_leaves_its_file_out_until_it_is_good_again(file, caplog):
    clock = Clock()
    source = CatalogSource(file, check_every_s=2.0, clock=clock)
    write(file, catalog_with("payments-api") + "---\nkind: Component\nmetadata: {name: x}\n")
    with caplog.at_level(logging.WARNING, logger="core.catalog"):
        for _ in range(3):
            clock.now += 2
            assert source.current().components == {}  # the broken file grants nothing
    assert source.problem is not None
    assert source.problem.startswith(f"{file}: Component x: apiVersion: missing")
    assert source.broken == (str(file),)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert len(warnings[0].getMessage().splitlines()) == 1
    assert str(file) in warnings[0].getMessage()

    write(file, catalog_with("payments-api", "search-api"))
    clock.now += 2
    assert list(source.current().components) == ["payments-api", "search-api"]
    assert (source.problem, source.broken) == (None, ())


def test_a_revocation_holds_while_another_file_is_broken(tmp_path):
    """Issue 40: deleting the file that made Eve a member, with a typo in another file, takes
    her out at once; the sound files keep deciding, the broken one contributes nothing."""
    write(tmp_path / "groups.yaml", GROUP.replace("members: []", "members: [alice]"))
    write(tmp_path / "alice.yaml", USER % ("alice", "U0ALICE", "[]"))
    write(tmp_path / "eve.yaml", USER % ("eve", "U0EVE", "[payments-oncall]"))
    write(tmp_path / "search.yaml", COMPONENT % "search-api")
    clock = Clock()
    source = CatalogSource(tmp_path, check_every_s=2.0, clock=clock)
    assert source.current().members("payments-oncall") == {"U0ALICE", "U0EVE"}
    (tmp_path / "eve.yaml").unlink()
    write(tmp_path / "search.yaml", (COMPONENT % "search-api").replace("lifecycle:", "lifecycl:"))
    clock.now += 2
    catalog = source.current()
    assert catalog.members("payments-oncall") == {"U0ALICE"}
    assert "search-api" not in catalog.components
    assert source.broken == (str(tmp_path / "search.yaml"),)


def test_a_name_defined_twice_leaves_both_files_out(tmp_path):
    """Which of two definitions was meant cannot be told: neither decides (an earlier file
    defining payments-oncall again cannot take over the real one)."""
    write(tmp_path / "groups.yaml", GROUP.replace("members: []", "members: [alice]"))
    write(tmp_path / "alice.yaml", USER % ("alice", "U0ALICE", "[]"))
    write(tmp_path / "payments.yaml", COMPONENT % "payments-api")
    clock = Clock()
    source = CatalogSource(tmp_path, check_every_s=2.0, clock=clock)
    write(tmp_path / "a-takeover.yaml", GROUP)
    clock.now += 2
    catalog = source.current()
    assert "payments-oncall" not in catalog.groups
    assert "payments-api" not in catalog.components  # its owner is in a file left out
    assert set(source.broken) == {str(tmp_path / "a-takeover.yaml"),
                                  str(tmp_path / "groups.yaml")}


def test_a_deleted_catalog_is_the_empty_one(file):
    clock = Clock()
    source = CatalogSource(file, check_every_s=2.0, clock=clock)
    file.unlink()
    clock.now += 2
    assert source.current().components == {}
    assert source.problem == f"{file}: no such file or folder; expected a Backstage " \
                             "catalog-info.yaml file or a folder of *.yaml files (Component, " \
                             "Group, User)"


def test_a_bad_catalog_at_start_is_refused(tmp_path):
    path = tmp_path / "catalog-info.yaml"
    write(path, "kind: [\n")
    with pytest.raises(CatalogError, match="not valid YAML"):
        CatalogSource(path)
    with pytest.raises(CatalogError, match="no such file or folder"):
        CatalogSource(tmp_path / "nowhere")


def test_no_path_is_the_empty_catalog():
    assert CatalogSource(None).current() is EMPTY_CATALOG


def test_many_threads_see_one_reload(file):
    clock = Clock()
    source = CatalogSource(file, check_every_s=2.0, clock=clock)
    write(file, catalog_with("payments-api", "search-api"))
    clock.now += 2
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(source.current().version))
               for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1 and len(seen) == 16


def test_a_slack_id_claimed_by_another_file_leaves_both_out(tmp_path):
    """Eve's file claiming Alice's Slack id would make Eve's clicks Alice's: neither counts."""
    write(tmp_path / "groups.yaml", GROUP.replace("members: []", "members: [alice]"))
    write(tmp_path / "alice.yaml", USER % ("alice", "U0ALICE", "[]"))
    clock = Clock()
    source = CatalogSource(tmp_path, check_every_s=2.0, clock=clock)
    write(tmp_path / "eve.yaml", USER % ("eve", "U0ALICE", "[payments-oncall]"))
    clock.now += 2
    assert source.current().members("payments-oncall") == frozenset()
    assert set(source.broken) == {str(tmp_path / "alice.yaml"), str(tmp_path / "eve.yaml")}
