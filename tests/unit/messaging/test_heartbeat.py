"""The heartbeat of a relay or consume process as ``opsgate health`` judges it: alive while every
loop polled within the bound, one line naming what is stuck otherwise, and the lag only when a
readiness check asks for it."""

from __future__ import annotations

import pytest

from core.messaging.heartbeat import Heartbeat, HeartbeatError, heartbeat_path, judged

NOW = 1_900_000_000.0


def beat(*, written_ago: float = 1.0, polls_ago: tuple[float, ...] = (0.5, 1.5),
         lag_s: float | None = 0.0, note: str = "") -> Heartbeat:
    return Heartbeat("consume", 42, NOW - written_ago,
                     {f"intake/w{n}": NOW - ago for n, ago in enumerate(polls_ago)}, lag_s, note)


def test_a_fresh_heartbeat_is_alive_in_one_line():
    assert judged(beat(lag_s=3.25), NOW) == (
        "consume (pid 42): alive; 2 loops polled within 1.5s; lag 3.2s")


def test_a_heartbeat_not_written_for_too_long_is_a_stuck_process():
    with pytest.raises(HeartbeatError, match=r"^consume \(pid 42\): heartbeat written 61s ago, "
                                             r"more than 60s: the process is stuck or gone$"):
        judged(beat(written_ago=61), NOW)


def test_one_loop_that_stopped_polling_is_named():
    with pytest.raises(HeartbeatError, match=r"1 of 2 loops stuck; intake/w1 last polled 90s"):
        judged(beat(polls_ago=(0.5, 90)), NOW)


def test_no_loop_polled_yet_is_not_alive():
    with pytest.raises(HeartbeatError, match="no loop has polled yet"):
        judged(beat(polls_ago=()), NOW)


def test_lag_counts_only_when_asked():
    behind = beat(lag_s=300)
    assert "lag 300.0s" in judged(behind, NOW)
    with pytest.raises(HeartbeatError, match=r"300s behind, more than 60s allowed$"):
        judged(behind, NOW, max_lag_s=60)
    unknown = beat(lag_s=None, note="lag unknown: the database is unreachable")
    assert judged(unknown, NOW).endswith("; lag unknown: the database is unreachable")
    with pytest.raises(HeartbeatError, match="lag unknown: the database is unreachable, more"):
        judged(unknown, NOW, max_lag_s=60)


def test_written_and_read_whole(tmp_path):
    path = heartbeat_path(str(tmp_path / "beats"), "relay")
    assert path == tmp_path / "beats" / "opsgate-relay.json"
    written = beat()
    written.write(path)
    assert Heartbeat.read(path) == written
    assert [p.name for p in path.parent.iterdir()] == ["opsgate-relay.json"]


def test_a_missing_or_broken_file_says_so_in_one_line(tmp_path):
    path = tmp_path / "opsgate-relay.json"
    with pytest.raises(HeartbeatError, match=r"no heartbeat at .*OPSGATE_HEARTBEAT_DIR\)$"):
        Heartbeat.read(path)
    path.write_text("{not json")
    with pytest.raises(HeartbeatError, match="unreadable heartbeat at"):
        Heartbeat.read(path)
