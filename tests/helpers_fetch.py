"""Local stand-ins for the network of the fetch commands: HTTP servers on 127.0.0.1 (a folder of files, and a
Hugging Face hub that serves one repository from a dict of files)."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import os
import threading
import urllib.parse
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


def tree_files(folder: str) -> dict[str, bytes]:
    """Relative path -> bytes of every file below ``folder``."""
    files = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            files[os.path.relpath(path, folder).replace(os.sep, "/")] = open(path, "rb").read()
    return files


def serve_folder(root: str) -> contextlib.AbstractContextManager[str]:
    """An HTTP file server of ``root``."""
    return serve(functools.partial(QuietFileHandler, directory=str(root)))


def git_blob_id(data: bytes) -> str:
    """git's object id of a file's bytes (computed here with hashlib, independently of the code under test)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubRepo:
    """The files of one hub repository (path -> bytes) and what the hub's API says of them.

    Files in ``lfs`` are listed with their SHA-256 (as LFS files are), the others with their git blob id.
    ``corrupt`` paths are listed with the checksum of their bytes but served with one byte changed.
    """

    def __init__(self, repo_id: str, files: dict[str, bytes], lfs: set[str] = frozenset(),
                 corrupt: set[str] = frozenset(), repo_type: str = "model"):
        self.repo_id, self.files, self.lfs, self.corrupt, self.repo_type = repo_id, files, lfs, corrupt, repo_type
        self.commit = hashlib.sha1(repr(sorted(files)).encode()).hexdigest()
        self.requests: list[str] = []

    def tree(self) -> list[dict]:
        """The JSON of ``GET /api/<type>s/<repo>/tree/<revision>?recursive=true``."""
        entries = []
        for path, data in sorted(self.files.items()):
            entry = {"type": "file", "path": path, "size": len(data), "oid": git_blob_id(data)}
            if path in self.lfs:
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 130}
            entries.append(entry)
        return entries

    def served(self, path: str) -> bytes:
        data = self.files[path]
        return data[:-1] + bytes([data[-1] ^ 1]) if path in self.corrupt else data

    def handler(self):
        """A request handler answering the hub API calls ``huggingface_hub`` makes to list and download files."""
        repo = self
        prefix = "" if self.repo_type == "model" else f"{self.repo_type}s/"

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _route(self) -> tuple[int, dict, bytes]:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                repo.requests.append(f"{self.command} {path}")
                tree = f"/api/{repo.repo_type}s/{repo.repo_id}/tree/"
                resolve = f"/{prefix}{repo.repo_id}/resolve/"
                if path.startswith(tree):
                    return 200, {"Content-Type": "application/json"}, json.dumps(repo.tree()).encode()
                if path.startswith(resolve):
                    name = path[len(resolve):].split("/", 1)[1]
                    if name in repo.files:
                        data = repo.served(name)
                        etag = hashlib.sha256(repo.files[name]).hexdigest() if name in repo.lfs else \
                            git_blob_id(repo.files[name])
                        return 200, {"ETag": f'"{etag}"', "X-Repo-Commit": repo.commit,
                                     "Content-Type": "application/octet-stream"}, data
                return 404, {"X-Error-Code": "EntryNotFound" if path.startswith(resolve) else "RepoNotFound",
                             "Content-Type": "application/json"}, b'{"error": "not found"}'

            def _answer(self, with_body: bool) -> None:
                status, headers, body = self._route()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def do_HEAD(self):
                self._answer(False)

            def do_GET(self):
                self._answer(True)

        return Handler
