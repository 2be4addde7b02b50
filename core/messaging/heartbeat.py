"""The heartbeat of a ``relay`` or ``consume`` process, which serves nothing a probe could call:
the process writes, every few seconds, when each of its loops last polled and how far behind it
is (a small JSON file, replaced whole); ``opsgate health relay|consume`` reads it and says in one
line whether the loop is alive. Liveness only: it asks no database, so an outage the loop waits
out does not restart the process; ``--max-lag-s`` adds the lag for a readiness check."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.errors import OpsgateError

Role = Literal["relay", "consume"]
ROLES: tuple[Role, ...] = ("relay", "consume")

EVERY_S = 2.0
"""How often a process writes its heartbeat."""

MAX_AGE_S = 60.0
"""A loop that has not polled this long is stuck: longer than the relay's longest wait (its poll
period, at most 60 s) and an outage's longest backoff (15 s), well under a probe's patience."""


class HeartbeatError(OpsgateError):
    """The heartbeat is missing, unreadable, stale or behind; the message is one line."""

    code = "unhealthy"


def heartbeat_path(directory: str | None, role: Role) -> Path:
    """Where a process of ``role`` writes its heartbeat: ``OPSGATE_HEARTBEAT_DIR`` (else the
    temporary directory), ``opsgate-<role>.json``."""
    return Path(directory or tempfile.gettempdir()) / f"opsgate-{role}.json"


class Polls:
    """When each of a process's loops last polled: each loop stamps its own name."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}

    def stamp(self, loop: str) -> None:
        self._at[loop] = time.time()

    def snapshot(self) -> dict[str, float]:
        return dict(self._at)


@dataclass(frozen=True)
class Heartbeat:
    """What a process wrote: when, each loop's last poll (Unix seconds), and its lag (seconds
    the oldest message it should have moved has waited; None when it could not tell why)."""

    role: str
    pid: int
    written_at: float
    polls: dict[str, float] = field(default_factory=dict)
    lag_s: float | None = None
    lag_note: str = ""

    def write(self, path: Path) -> None:
        """Replace the file whole, so a reader never sees half of it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(handle, "w") as out:
            json.dump(self.__dict__, out)
        os.replace(temporary, path)

    @classmethod
    def read(cls, path: Path) -> Heartbeat:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            return cls(role=str(data["role"]), pid=int(data["pid"]),
                       written_at=float(data["written_at"]),
                       polls={str(k): float(v) for k, v in dict(data["polls"]).items()},
                       lag_s=None if data.get("lag_s") is None else float(data["lag_s"]),
                       lag_note=str(data.get("lag_note", "")))
        except FileNotFoundError:
            raise HeartbeatError(f"no heartbeat at {path}: the process has not started its "
                                 "loop, or writes elsewhere (OPSGATE_HEARTBEAT_DIR)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HeartbeatError(f"unreadable heartbeat at {path}: {exc}") from None


def judged(beat: Heartbeat, now: float, *, max_age_s: float = MAX_AGE_S,
           max_lag_s: float | None = None) -> str:
    """One line saying the loop is alive (and within ``max_lag_s``); ``HeartbeatError`` with
    one line saying why not."""
    written = now - beat.written_at
    if written > max_age_s:
        raise HeartbeatError(f"{beat.role} (pid {beat.pid}): heartbeat written {written:.0f}s "
                             f"ago, more than {max_age_s:g}s: the process is stuck or gone")
    if not beat.polls:
        raise HeartbeatError(f"{beat.role} (pid {beat.pid}): no loop has polled yet")
    stuck = {loop: now - at for loop, at in beat.polls.items() if now - at > max_age_s}
    if stuck:
        loop, age = max(stuck.items(), key=lambda item: item[1])
        raise HeartbeatError(f"{beat.role} (pid {beat.pid}): {len(stuck)} of "
                             f"{len(beat.polls)} loops stuck; {loop} last polled {age:.0f}s ago")
    if max_lag_s is not None and (beat.lag_s is None or beat.lag_s > max_lag_s):
        behind = beat.lag_note or f"{beat.lag_s:.0f}s behind"
        raise HeartbeatError(f"{beat.role} (pid {beat.pid}): {behind}, more than "
                             f"{max_lag_s:g}s allowed")
    last = max(now - at for at in beat.polls.values())
    lag = beat.lag_note or f"lag {beat.lag_s:.1f}s"
    return (f"{beat.role} (pid {beat.pid}): alive; {len(beat.polls)} loops polled within "
            f"{last:.1f}s; {lag}")
