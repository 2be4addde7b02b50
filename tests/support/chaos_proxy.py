"""A fault-injecting TCP proxy on 127.0.0.1 for chaos tests: it forwards to a local server and,
with seeded probabilities, refuses connections, delays chunks, resets mid-reply and swallows a
reply the server already sent (the request reached the server; the caller never hears back), and
blackholes the link (``blackhole``: every byte either way dropped, no connection closed)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass
from types import TracebackType

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Faults:
    """Probabilities of each fault: ``refuse`` per new connection, the others per chunk."""

    refuse: float = 0.0  # a new connection is reset before any byte is forwarded
    drop_reply: float = 0.0  # the server's reply is swallowed, then both sides are closed
    reset_mid_reply: float = 0.0  # half of a reply is forwarded, then the client gets an RST
    delay: float = 0.0  # a chunk (either direction) is held back for a while
    delay_s: tuple[float, float] = (0.0005, 0.005)


CALM = Faults()


class ChaosProxy:
    """``with ChaosProxy(6379, Faults(drop_reply=0.3), seed=7) as proxy:`` then dial ``proxy.port``.

    It runs its own event loop in a daemon thread and stops by itself after ``time_limit_s``
    (the listener closes and every open connection is aborted). ``faults`` may be reassigned
    while it runs, e.g. to calm the network before a final check. ``counts`` tallies what it did.
    """

    def __init__(
        self,
        target_port: int,
        faults: Faults = CALM,
        *,
        seed: int = 0,
        time_limit_s: float = 120.0,
        target_host: str = "127.0.0.1",
    ) -> None:
        self.target = (target_host, target_port)
        self.faults = faults
        self.time_limit_s = time_limit_s
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._rng = random.Random(seed)  # used only on the proxy's loop thread
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._targeted: list[bytes] = []  # markers whose next reply is swallowed, once each
        self._before_cut = faults
        self.blackholed = False  # read on the loop thread: a plain flag is enough

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ChaosProxy:
        self.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(5.0) or not self.port:
            raise RuntimeError("chaos proxy did not start")

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            # RuntimeError: the loop closed in between, so it already stopped.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def cut(self) -> None:
        """Sever the link, as a network partition does: every open connection is aborted now
        and new ones are refused until ``heal``."""
        assert self._loop is not None, "the proxy is not running"
        self._before_cut = self.faults
        self.faults = Faults(refuse=1.0)
        aborted = threading.Event()

        def abort_open() -> None:
            for writer in list(self._open):
                writer.transport.abort()
            aborted.set()

        self._loop.call_soon_threadsafe(abort_open)
        aborted.wait(5.0)

    def heal(self) -> None:
        """Forward again as before the cut (or the blackhole)."""
        self.faults = self._before_cut
        self.blackholed = False

    def blackhole(self) -> None:
        """Drop every byte from now on, both ways, as a network that loses packets does: no
        reset, no close, no answer; new connections are accepted and then hear nothing."""
        self.blackholed = True

    def drop_reply_to(self, marker: bytes, times: int = 1) -> None:
        """Swallow the reply to the next ``times`` requests containing ``marker`` (e.g. a
        COMMIT): a deterministic "the request reached the server, the answer never came back"."""
        self._targeted.extend([marker] * times)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            self._ready.set()  # unblock start() if binding failed
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        timer = asyncio.get_running_loop().call_later(self.time_limit_s, self._stop.set)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            timer.cancel()
            server.close()
            for writer in list(self._open):
                writer.transport.abort()
            # Aborted sockets end the pumps; cancel only what is still stuck (a cancelled
            # handler makes asyncio log a spurious error, so it is the last resort).
            if self._handlers:
                _, stuck = await asyncio.wait(set(self._handlers), timeout=1.0)
                for handler in stuck:
                    handler.cancel()

    # -- one connection -------------------------------------------------------------------
    def _roll(self, probability: float) -> bool:
        return probability > 0.0 and self._rng.random() < probability

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await self._proxy(client_r, client_w)
        finally:
            self._handlers.discard(handler)

    async def _proxy(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.blackholed:
            self.counts["blackholed"] += 1
            self._open.add(client_w)
            while await client_r.read(_CHUNK):  # swallowed until the client gives up
                pass
            self._open.discard(client_w)
            client_w.transport.abort()
            return
        if self._roll(self.faults.refuse):
            self.counts["refused"] += 1
            _reset(client_w)
            return
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            self.counts["upstream_down"] += 1
            _reset(client_w)
            return
        self.counts["connections"] += 1
        self._open.update((client_w, server_w))
        doomed = asyncio.Event()  # set when the reply to the last request must be swallowed
        pumps = {
            asyncio.create_task(self._forward_requests(client_r, server_w, doomed)),
            asyncio.create_task(self._forward_replies(server_r, client_w, server_w, doomed)),
        }
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for writer in (client_w, server_w):
                self._open.discard(writer)
                writer.transport.abort()

    async def _maybe_delay(self) -> None:
        if self._roll(self.faults.delay):
            self.counts["delayed"] += 1
            await asyncio.sleep(self._rng.uniform(*self.faults.delay_s))

    async def _forward_requests(
        self, client_r: asyncio.StreamReader, server_w: asyncio.StreamWriter, doomed: asyncio.Event
    ) -> None:
        while chunk := await client_r.read(_CHUNK):
            for marker in self._targeted:
                if marker in chunk:
                    self._targeted.remove(marker)
                    doomed.set()
                    break
            if self.blackholed:
                continue
            await self._maybe_delay()
            server_w.write(chunk)
            await server_w.drain()

    async def _forward_replies(
        self,
        server_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        server_w: asyncio.StreamWriter,
        doomed: asyncio.Event,
    ) -> None:
        while chunk := await server_r.read(_CHUNK):
            if self.blackholed:
                continue
            if doomed.is_set() or self._roll(self.faults.drop_reply):
                # The request reached the server and it answered: the caller never learns that.
                self.counts["dropped_replies"] += 1
                client_w.close()
                server_w.close()
                return
            if self._roll(self.faults.reset_mid_reply) and len(chunk) > 1:
                self.counts["reset_mid_reply"] += 1
                client_w.write(chunk[: len(chunk) // 2])
                await client_w.drain()
                _reset(client_w)
                return
            await self._maybe_delay()
            client_w.write(chunk)
            await client_w.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0) rather than a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
