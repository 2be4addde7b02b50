"""Keeps the loop's workers (the relay, each stream consumer) running, a thread each, until their
stop event is set; a failure a worker did not handle itself restarts it. SIGTERM/SIGINT set the
event of a process. The in-process loop and the ``relay`` and ``consume`` processes share it."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from core.errors import InternalError

log = logging.getLogger(__name__)

Work = Callable[[threading.Event], None]
"""A worker's loop: runs until the event is set (it retries its own expected failures)."""


class WorkersDied(InternalError, RuntimeError):
    """Every worker thread of a supervisor died; each one's failure is in the log."""

    code = "workers_died"


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the process to stop after the work in hand."""

    def _stop(signum: int, _frame: object) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def keep_running(name: str, work: Work, stop: threading.Event, restart_after_s: float) -> None:
    """Run ``work`` until ``stop`` is set, again after ``restart_after_s`` whenever it raises."""
    # A worker's thread must outlive any one failure (a Redis error the relay's own retry does
    # not know, a bug): a dead relay or consumer would silently stop every case.
    while not stop.is_set():
        try:
            work(stop)
        except Exception:
            log.exception("%s failed; restarting in %.1fs", name, restart_after_s)
            stop.wait(restart_after_s)


class Supervisor:
    """The worker threads of one loop, all stopped by one event (a consumer is never cut off
    mid-message, the relay never mid-batch)."""

    def __init__(self, stop: threading.Event, role: str) -> None:
        self.stop = stop
        self.role = role
        self.threads: list[threading.Thread] = []

    def start(self, name: str, work: Work, *, restart_after_s: float) -> None:
        """Run ``work`` on a daemon thread called ``name``, restarted after a failure."""
        thread = threading.Thread(target=keep_running, name=name, daemon=True,
                                  args=(name, work, self.stop, restart_after_s))
        thread.start()
        self.threads.append(thread)

    @property
    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def watch(self, every_s: float, report: Callable[[], None]) -> None:
        """Call ``report`` every ``every_s`` until the stop event is set; ``WorkersDied``
        when every worker thread has died meanwhile. A report that fails (the database it
        reads is away) is logged and skipped: progress lines never end the process."""
        while not self.stop.wait(every_s):
            if not self.alive:
                raise WorkersDied(f"every {self.role} thread died; see the log above")
            try:
                report()
            except Exception as exc:
                log.warning("%s progress report skipped: %s", self.role, exc)

    def join(self, timeout_s: float) -> bool:
        """Wait for each thread up to ``timeout_s``; True when all have ended."""
        for thread in self.threads:
            thread.join(timeout_s)
        return not self.alive
