"""The chaos proxy itself: it forwards faithfully when calm, and each fault does what it says."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.chaos_proxy import ChaosProxy, Faults


class _Echo(socketserver.BaseRequestHandler):
    """Echoes every chunk and remembers what reached it (the 'server side' of a request)."""

    received: list[bytes]

    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.server.received.append(data)  # type: ignore[attr-defined]
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def echo_port(echo: socketserver.ThreadingTCPServer) -> int:
    return int(echo.server_address[1])


def _exchange(port: int, payload: bytes) -> bytes:
    """Send ``payload`` and read until the peer closes or ``len(payload)`` bytes came back."""
    reply = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(payload)
            while len(reply) < len(payload):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except ConnectionResetError:
        reply += b"<RST>"
    return reply


def test_calm_proxy_forwards_both_ways(echo_port: int) -> None:
    with ChaosProxy(echo_port, seed=1, time_limit_s=10) as proxy:
        assert _exchange(proxy.port, b"PING\r\n") == b"PING\r\n"
        assert proxy.counts["connections"] == 1


def test_refused_connection_forwards_nothing(echo_port: int) -> None:
    with ChaosProxy(echo_port, Faults(refuse=1.0), time_limit_s=10) as proxy:
        assert _exchange(proxy.port, b"PING\r\n") in (b"", b"<RST>")
        assert proxy.counts["refused"] == 1
        assert proxy.counts["connections"] == 0


def test_dropped_reply_reached_the_server_first(echo: socketserver.ThreadingTCPServer) -> None:
    with ChaosProxy(int(echo.server_address[1]), Faults(drop_reply=1.0), time_limit_s=10) as proxy:
        reply = _exchange(proxy.port, b"SET k v NX\r\n")
    assert reply in (b"", b"<RST>")  # the caller hears nothing back …
    assert echo.received == [b"SET k v NX\r\n"]  # type: ignore[attr-defined]  # … the server did
    assert proxy.counts["dropped_replies"] == 1


def test_reset_mid_reply_delivers_a_partial_reply(echo_port: int) -> None:
    with ChaosProxy(echo_port, Faults(reset_mid_reply=1.0), time_limit_s=10) as proxy:
        reply = _exchange(proxy.port, b"0123456789")
    assert reply.startswith(b"01234")
    assert not reply.startswith(b"0123456789")
    assert proxy.counts["reset_mid_reply"] == 1


def test_delay_is_injected_and_counted(echo_port: int) -> None:
    with ChaosProxy(echo_port, Faults(delay=1.0, delay_s=(0.001, 0.002)), time_limit_s=10) as proxy:
        assert _exchange(proxy.port, b"x") == b"x"
    assert proxy.counts["delayed"] >= 2  # request and reply


def test_same_seed_same_faults(echo_port: int) -> None:
    def run(seed: int) -> list[bytes]:
        with ChaosProxy(echo_port, Faults(refuse=0.5), seed=seed, time_limit_s=10) as proxy:
            return [_exchange(proxy.port, b"a") for _ in range(20)]

    first = run(3)
    assert first == run(3)
    assert b"a" in first and any(reply != b"a" for reply in first)


def test_stops_by_itself_after_its_time_limit(echo_port: int) -> None:
    proxy = ChaosProxy(echo_port, time_limit_s=0.2)
    proxy.start()
    deadline = time.monotonic() + 5
    while proxy.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not proxy.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1.0).close()


def test_context_manager_stops_it(echo_port: int) -> None:
    with ChaosProxy(echo_port, time_limit_s=60) as proxy:
        assert proxy.running
    assert not proxy.running


def test_drop_reply_to_swallows_only_the_targeted_reply(
    echo: socketserver.ThreadingTCPServer,
) -> None:
    with ChaosProxy(int(echo.server_address[1]), time_limit_s=10) as proxy:
        proxy.drop_reply_to(b"COMMIT")
        assert _exchange(proxy.port, b"SELECT") == b"SELECT"
        assert _exchange(proxy.port, b"COMMIT") in (b"", b"<RST>")
        assert _exchange(proxy.port, b"COMMIT") == b"COMMIT"  # once only
    assert echo.received.count(b"COMMIT") == 2  # type: ignore[attr-defined]
