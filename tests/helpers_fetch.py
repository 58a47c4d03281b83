"""Local stand-ins for the network of the fetch commands: HTTP servers on 127.0.0.1 (a folder of files, and a
Hugging Face hub that serves one repository from a dict of files)."""
from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator

OFFLINE_URL = "http://127.0.0.1:9"  # the discard port: nothing listens, so a connection is refused at once


class QuietFileHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder, without request logs."""

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(handler) -> Iterator[str]:
    """Run ``handler`` (a request handler class or factory) on a free port of 127.0.0.1; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve_folder(root: str) -> contextlib.AbstractContextManager[str]:
    """An HTTP file server of ``root``."""
    return serve(functools.partial(QuietFileHandler, directory=str(root)))
