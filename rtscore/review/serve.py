"""``rts review serve``: the review directory over a local, read-only HTTP server, for a browser or tool that
refuses pages opened from ``file://`` (the page itself needs no server)."""

from __future__ import annotations

import functools
import http.server
import logging
import socket
import threading
from pathlib import Path
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
