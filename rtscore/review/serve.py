"""``rts review serve``: the review directory over a local, read-only HTTP server, for a browser or tool that
refuses pages opened from ``file://`` (the page itself needs no server).

``rts review serve`` runs it until SIGINT (Ctrl-C) or SIGTERM (:func:`serve_until_stopped`), however it was started: a
process started in the background of a non-interactive shell (``rts review serve review/ &`` in a script, a CI job,
a test run started that way) inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt for it, so
Ctrl-C and ``kill -INT`` would not stop it; and SIGTERM's default ends the process without shutting the server
down. Both handlers are installed explicitly (the cause of the Prefect workers' SIGTERM issue was the same ignored
SIGINT: docs/cloud.md, "Stopping workers").
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from rtscore.review.manifest import PAGE_FILE, ReviewError

log = logging.getLogger(__name__)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """GET and HEAD of the directory's files only (SimpleHTTPRequestHandler answers any other method 501)."""

    def end_headers(self) -> None:
        # The verdicts live in the browser; the page and its data are re-read on every reload.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


class _Server6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(review_dir: Path, host: str = "127.0.0.1", port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``review_dir`` (read-only) from a background thread; ``port=0`` takes a free port.

    Returns:
        The running server (call ``shutdown()`` to stop it) and the page's URL.

    Raises:
        ReviewError: ``review_dir`` has no review page (``index.html``), or the address cannot be bound.
    """
    root = Path(review_dir).resolve()
    if not (root / PAGE_FILE).is_file():
        raise ReviewError(
            f"{root}: no review page ({PAGE_FILE}); serve the directory `rts review export` wrote (it writes the page)"
        )
    handler = functools.partial(_Handler, directory=str(root))
    server_class = _Server6 if ":" in host else http.server.ThreadingHTTPServer
    try:
        server = server_class((host, port), handler)
    except OSError as err:
        raise ReviewError(f"cannot serve {root} on {host}:{port} ({err}); choose another --port") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="rts-review-serve", daemon=True).start()
    bound_host, bound_port = server.server_address[:2]
    shown = bound_host if isinstance(bound_host, str) else bound_host.decode()
    if ":" in shown:
        shown = f"[{shown}]"
    return server, f"http://{shown}:{bound_port}/{PAGE_FILE}"


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread as SIGINT raises KeyboardInterrupt (a BaseException too: no ``except
    Exception`` on the way swallows it)."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise _Terminated(signum)


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM end the block quietly, whatever their dispositions were when this process started (module
    docstring); the previous handlers are put back after it. Main thread only (``signal.signal``)."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.getsignal(s) for s in stops}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        for s, handler in previous.items():
            if handler is not None:  # None: a handler not installed from Python, left as it is
                signal.signal(s, handler)


def serve_until_stopped(
    review_dir: Path, host: str, port: int, on_ready: Callable[[str], object] = lambda url: None
) -> None:
    """:func:`serve` until SIGINT or SIGTERM, then shut the server down and close its socket (and return).

    The handlers are installed before the server starts and ``on_ready(url)`` announces it, so a signal sent as soon
    as the page is announced is never lost. Call it from the main thread.

    Raises:
        ReviewError: as :func:`serve`.
    """
    with _stopped_by_signals():
        server, url = serve(review_dir, host=host, port=port)  # served from a background thread
        try:
            on_ready(url)
            threading.Event().wait()
        finally:
            server.shutdown()
            server.server_close()
