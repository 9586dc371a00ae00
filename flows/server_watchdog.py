"""Stops Prefect's temporary API server when the `rts` process that started it dies, even by kill -9.

Run as ``python server_watchdog.py PARENT_PID SERVER_PID`` by :func:`flows.common.start_local_api`; standard
library only (it starts in a fraction of a second). It polls its parent: once it has been re-parented (the
parent is gone without stopping it), it terminates the server, checking first that the pid still is that
server. On a normal exit the parent stops the watchdog first, then the server.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.5
GRACE_S = 10.0


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not reaped, is not)."""
    if Path("/proc/self").exists():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_prefect_server(pid: int) -> bool:
    """The pid is (still) Prefect's uvicorn server, not a process that reused the number."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc/self").exists()  # no /proc (macOS): trust the pid we were given
    return b"uvicorn" in cmdline and b"prefect" in cmdline


def stop(pid: int) -> None:
    """SIGTERM (uvicorn shuts down cleanly), then SIGKILL after :data:`GRACE_S`."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if running(pid):
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    parent, server = int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent handles it
    while os.getppid() == parent:
        if not running(server):
            return 0
        time.sleep(POLL_S)
    if running(server) and is_prefect_server(server):
        stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
