"""Stops Prefect's temporary API server when the `rts` process that started it dies, even by kill -9.

Run as ``python server_watchdog.py PARENT_PID TOKEN`` by :func:`flows.common.start_local_api` *before* the server
starts: there is no moment at which a server runs unwatched. The server is not known by its pid (it has none yet
when the watchdog starts, and Prefect starts a second one when the first port was taken) but by ``TOKEN``: the
parent puts ``RTS_SERVER_WATCHDOG=TOKEN`` in its environment while the server starts, so that every server it
starts carries it. The watchdog polls its parent (standard library only, so it is up in a fraction of a second);
once it has been re-parented (the parent is gone without stopping it) it stops every process that carries the
token and is Prefect's uvicorn server, looking again for :data:`SETTLE_S` for one that was still being started.
On a normal exit the parent stops the server, then the watchdog.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

TOKEN_ENV = "RTS_SERVER_WATCHDOG"
POLL_S = 0.5
SETTLE_S = 3.0  # after the parent died: a server forked but not yet exec'd carries the token a moment later
GRACE_S = 10.0


def is_prefect_server(cmdline: list[str]) -> bool:
    """The command line of Prefect's temporary server (``python -m uvicorn ... prefect.server.api...``)."""
    text = " ".join(cmdline)
    return "uvicorn" in text and "prefect" in text


def servers(token: str) -> list[Any]:
    """The live processes that carry ``token`` and are Prefect's uvicorn server (psutil: imported only once
    the parent is gone, so that the watchdog itself starts at once)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.environ().get(TOKEN_ENV) != token:
                continue
            if is_prefect_server(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):  # gone, or not ours to read
            continue
    return found


def stopped(proc: Any) -> bool:
    """Gone, or a zombie: exited, and not ours to reap (an orphan's reaper may be slow, or never reap)."""
    import psutil

    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def stop(procs: list[Any]) -> None:
    """SIGTERM (uvicorn shuts down cleanly), then SIGKILL what is left after :data:`GRACE_S`."""
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    while not all(stopped(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in procs:
        if not stopped(p):
            with contextlib.suppress(psutil.Error):
                p.kill()


def main(argv: list[str]) -> int:
    parent, token = int(argv[1]), argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent handles it
    while os.getppid() == parent:
        time.sleep(POLL_S)
    stopped: set[int] = set()
    deadline = time.monotonic() + SETTLE_S
    while True:
        found = [p for p in servers(token) if p.pid not in stopped]
        stop(found)
        stopped.update(p.pid for p in found)
        if time.monotonic() >= deadline:
            return 0
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
