"""The loop's supervisor: a worker that raises is started again; the watch gives up only when
every worker thread has ended."""

from __future__ import annotations

import threading

import pytest

from core.messaging.supervisor import Supervisor, keep_running


def test_a_worker_that_raises_runs_again_until_stopped():
    stop, runs = threading.Event(), []

    def work(stop: threading.Event) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("a bug nobody expected")
        stop.set()

    keep_running("worker", work, stop, restart_after_s=0)
    assert len(runs) == 3


def test_the_workers_stop_together_and_the_watch_reports_meanwhile():
    stop, reports = threading.Event(), []
    workers = Supervisor(stop, "test")
    for n in range(3):
        workers.start(f"worker-{n}", lambda stop: stop.wait(), restart_after_s=0)

    def report() -> None:
        reports.append(1)
        if len(reports) == 2:
            stop.set()

    workers.watch(0.01, report)
    assert workers.join(5) and not workers.alive and len(reports) == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_watch_gives_up_when_every_worker_thread_has_ended():
    stop = threading.Event()
    workers = Supervisor(stop, "test")

    def work(_stop: threading.Event) -> None:
        raise SystemExit  # no Exception: nothing restarts it, its thread ends

    workers.start("worker", work, restart_after_s=0)
    workers.threads[0].join(5)
    stop_later = threading.Timer(5, stop.set)
    stop_later.start()
    try:
        with pytest.raises(RuntimeError, match="every test thread died"):
            workers.watch(0.01, lambda: None)
    finally:
        stop_later.cancel()
