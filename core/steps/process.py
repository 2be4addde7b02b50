"""The one way opsgate runs a process: an argv (never a shell) in a session and process group of
its own, a minimal environment, output captured and bounded, and at the deadline the whole group
terminated (SIGTERM, then SIGKILL after a grace period). When the step ends, nothing it started
is left behind in its group."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.outbound.allowlists import EnvAllowList
from core.steps.capture import BoundedBuffer

# What a step's process inherits from ours; everything else (tokens, database URLs, proxies)
# stays here. An allow-list: a variable nobody named never reaches a step.
BASE_ENV: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_*", "TZ")
_CHUNK = 65536
_SLICE_S = 0.05  # how often the leader's exit is checked while its output is quiet
_LINGER_S = 0.2  # how long output may stay open after the leader exited (a leftover holds it)


@dataclass(frozen=True)
class ProcessResult:
    argv: tuple[str, ...]
    exit_code: int  # negative: killed by that signal
    timed_out: bool
    duration_s: float
    output: str  # stdout and stderr interleaved, bounded, with a marker where cut
    output_bytes: int  # everything the process wrote, kept or not


def minimal_env(extra: Mapping[str, str] | None = None, passthrough: Iterable[str] = BASE_ENV,
                ) -> dict[str, str]:
    """The environment a step's process gets: ``passthrough`` names (``LC_*``: a prefix) from
    ours, then ``extra`` (the caller checked its names)."""
    env = EnvAllowList(passthrough).pick(os.environ)
    env.setdefault("PATH", os.defpath)
    return {**env, **(extra or {})}


def run_process(argv: Sequence[str], *, timeout_s: float, output_limit: int,
                env: Mapping[str, str], cwd: str | None = None, grace_s: float = 2.0,
                ) -> ProcessResult:
    """Run ``argv`` to completion or to ``timeout_s``; ``OSError`` when it cannot start."""
    started = time.monotonic()
    proc = subprocess.Popen(  # noqa: S603 (argv only, validated and allow-listed by the caller)
        list(argv), shell=False, start_new_session=True, close_fds=True, cwd=cwd,
        env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    output = BoundedBuffer(output_limit)
    try:
        timed_out = _pump(proc, fd, output, started + timeout_s)
        _end_group(proc, grace_s)
        _drain(fd, output)
    finally:
        if proc.poll() is None:  # interrupted (KeyboardInterrupt…): leave nothing running
            _end_group(proc, 0.0)
        proc.stdout.close()
    return ProcessResult(
        argv=tuple(argv), exit_code=proc.wait(), timed_out=timed_out,
        duration_s=round(time.monotonic() - started, 3), output=output.text(),
        output_bytes=output.total,
    )


def _pump(proc: subprocess.Popen[bytes], fd: int, output: BoundedBuffer, deadline: float) -> bool:
    """Collect output until the leader exits and its output closes; True when the deadline hit."""
    os.set_blocking(fd, False)
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return True
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at >= _LINGER_S:
                return False
            if not selector.select(min(deadline - now, _SLICE_S)):
                continue
            chunk = _read(fd)
            if chunk == b"":
                return _wait_exit(proc, deadline)
            output.feed(chunk or b"")


def _read(fd: int) -> bytes | None:
    """A chunk, ``b""`` at end of output, ``None`` when nothing is ready after all."""
    try:
        return os.read(fd, _CHUNK)
    except BlockingIOError:
        return None


def _wait_exit(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM whatever is left in the step's group, SIGKILL what outlives ``grace_s``.

    The group id is the leader's pid; Linux does not reuse a pid while a group still carries
    it, so signalling the group after the leader was reaped cannot hit a stranger.
    """
    if not _signal_group(proc.pid, signal.SIGTERM):
        return
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        proc.poll()  # reap the leader so it does not hold the group open as a zombie
        if not _group_alive(proc.pid):
            return
        time.sleep(0.02)
    _signal_group(proc.pid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: wait (bounded) until the group really is gone, so
    # the step's caller never sees a member still running after the step ended.
    end = time.monotonic() + grace_s
    while _group_alive(proc.pid) and time.monotonic() < end:
        proc.poll()
        time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is still in the group. Orphans are reaped by PID 1,
    which may take seconds: a group of zombies is finished, whatever ``killpg`` says."""
    if not _signal_group(pgid, 0):
        return False
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no procfs: trust killpg
        return True
    return any(_live_member(pid, pgid) for pid in pids)


def _live_member(pid: str, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False  # gone while we looked
    return int(fields[2]) == pgid and fields[0] not in (b"Z", b"X")


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed credentials; the group still exists
        return True
    return True


def _drain(fd: int, output: BoundedBuffer) -> None:
    """What the group wrote before it died; stops at end of output or when nothing is ready
    (a process that left the group may hold the pipe open forever)."""
    while chunk := _read(fd):
        output.feed(chunk)
