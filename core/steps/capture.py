"""Bounded capture of a step's output: keeps the head and the tail, counts what it dropped, so
a step that prints gigabytes costs a few KiB of memory and still shows how it ended."""

from __future__ import annotations


class BoundedBuffer:
    """Bytes fed in pieces; at most ``limit`` are kept (half head, half tail)."""

    def __init__(self, limit: int) -> None:
        self._half = max(1, limit // 2)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            del self._tail[: -self._half]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    def text(self) -> str:
        """What was kept, decoded leniently, with a marker where bytes were dropped."""
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        dropped = self.total - len(self._head) - len(self._tail)
        return f"{head}\n…[{dropped} bytes truncated]…\n{tail}"


def truncate(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` bytes of UTF-8, head and tail, with the same marker."""
    buffer = BoundedBuffer(limit)
    buffer.feed(text.encode("utf-8"))
    return buffer.text()
