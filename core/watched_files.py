"""Files a running service reads again when they change: a stamp of the files (path, time,
size, inode: an edit, an added, removed or replaced file all change it) and a throttle that looks
at most every so often, one caller at a time (callers arriving during a reload wait for it and get
its result). The catalog and the policy sources are built on it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

Stamp = tuple[tuple[str, int, int, int], ...]


def stamp_of(files: Iterable[Path]) -> Stamp:
    """What changes when one of ``files`` is edited, added, removed or replaced."""
    return tuple(_file_stamp(file) for file in files)


def _file_stamp(file: Path) -> tuple[str, int, int, int]:
    try:
        found = file.stat()
    except OSError:
        return (str(file), -1, -1, -1)
    return (str(file), found.st_mtime_ns, found.st_size, found.st_ino)


class Throttle:
    """Runs a look at most every ``every_s`` seconds of ``clock``, one caller at a time."""

    def __init__(self, every_s: float, clock: Callable[[], float]) -> None:
        self._every, self._clock = every_s, clock
        self._lock = threading.Lock()
        self._looked_at = clock()

    def look(self, look: Callable[[], None]) -> None:
        """``look()`` once the last look is ``every_s`` old (the wait restarts if it raised)."""
        if self._clock() - self._looked_at < self._every:
            return
        with self._lock:
            if self._clock() - self._looked_at >= self._every:
                try:
                    look()
                finally:
                    self._looked_at = self._clock()
