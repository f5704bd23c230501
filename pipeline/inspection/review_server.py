"""The review page's server: a local web page to accept or reject clips and correct captions.

`serve(path, port)` serves, on 127.0.0.1 only, the page (pipeline/inspection/review_page.html), the clips'
media by clip id (`/media/<id>.mp4`, the H.264 bytes stored in the shard; `/media/<id>.jpg`, the
stored first frame), and a small JSON API that the page uses and scripts can use:

    GET  /api/clips?film=&usable=&reason=&caption_status=&motion_level=&character=&decision=
         &offset=&limit=   (a page of the matching clips; no limit: all of them)
         and the scores' filters (stages/scoring/scores.py): &camera_motion=pan_left&clarity_min=0.5...
    POST /api/review  {"clip_id": "...", "decision": "accept"|"reject", "note": "...",
                       "fields": {"subject": "girl", "characters": ["Sintel"], ...}}

A decision is written to the film's review.parquet and its manifest.parquet is rebuilt before the
answer goes out (pipeline/data/review.py holds the rules of decisions; every corrected field is checked
here with the caption parser's own domain rules, stages/captioning/parsing.py). Requests are checked before anything is
written: an unknown clip id is a 404, an unknown decision or an out-of-domain field a 400, each
with a message saying what is wrong.

Being a local tool that writes files, it answers only requests addressed to 127.0.0.1 or
localhost at its own port (a DNS-rebinding page cannot reach it), and takes decisions only as
`application/json`, which a page of another origin cannot send without a CORS preflight that this
server never grants.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pipeline.data.review import ReviewError
from pipeline.inspection.explore import DatasetError
from pipeline.inspection.review_app import NotFound, ReviewApp, check_fields

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PAGE = Path(__file__).with_name("review_page.html")
MAX_BODY = 1 << 20  # a decision is a few hundred bytes
_MEDIA = re.compile(r"^/media/(?P<clip_id>[0-9a-f]{32})\.(?P<kind>mp4|jpg)$")


class ReviewHandler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "animegamer-review"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_HEAD(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def _answer(self, handle) -> None:
        self._unread = self._body_length()
        try:
            self._check_host()
            handle()
        except NotFound as exc:
            self._json({"error": str(exc)}, HTTPStatus.NOT_FOUND)
        except ReviewError as exc:
            self._json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except _Refused as exc:
            self._json({"error": str(exc)}, exc.status)
        except Exception as exc:
            log.error("%s %s failed:\n%s", self.command, self.path, traceback.format_exc())
            self._json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.INTERNAL_SERVER_ERROR)
        finally:
            self._discard_body()

    def _body_length(self) -> int | None:
        """The bytes of body the request declares, or None where they cannot be known (chunked,
        a bad Content-Length): then the connection is closed after the answer."""
        if self.headers.get("Transfer-Encoding"):
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return None
        return length if length >= 0 else None

    def _discard_body(self) -> None:
        """A request refused before its body was read (a foreign origin, a wrong content type, a
        wrong path) still sent that body: on a kept-alive connection the next request would be
        parsed from it. Read it away, or close the connection where it is too long or unknown."""
        if self._keeps_connection():
            if self._unread:
                self.rfile.read(self._unread)
        else:
            self.close_connection = True
        self._unread = 0

    def _keeps_connection(self) -> bool:
        return self._unread is not None and self._unread <= MAX_BODY

    def _read_body(self) -> bytes:
        if not self._keeps_connection():
            raise _Refused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"send the body with a Content-Length of at most {MAX_BODY} bytes",
            )
        body, self._unread = self.rfile.read(self._unread or 0), 0
        return body

    def _check_host(self) -> None:
        allowed = {f"{HOST}:{self.server.port}", f"localhost:{self.server.port}"}
        if self.headers.get("Host") not in allowed:
            raise _Refused(
                HTTPStatus.FORBIDDEN,
                f"this server answers only requests to {HOST}:{self.server.port}",
            )
        origin = self.headers.get("Origin")
        if origin is not None and origin not in {f"http://{a}" for a in allowed}:
            raise _Refused(HTTPStatus.FORBIDDEN, f"requests from {origin} are not accepted")

    def _get(self) -> None:
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(PAGE.read_bytes(), "text/html; charset=utf-8")
        elif url.path == "/api/clips":
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=False).items()}
            self._json(self.server.app.clips(query))
        elif media := _MEDIA.match(url.path):
            data = self.server.app.media(media["clip_id"], media["kind"])
            kind = "video/mp4" if media["kind"] == "mp4" else "image/jpeg"
            self._send_media(data, kind)
        elif url.path == "/favicon.ico":
            self._send(b"", "image/x-icon", HTTPStatus.NO_CONTENT)
        else:
            raise NotFound(f"no such page: {url.path}")

    def _post(self) -> None:
        if urlsplit(self.path).path != "/api/review":
            raise NotFound(f"no such endpoint: POST {self.path}")
        if self.headers.get_content_type() != "application/json":
            raise _Refused(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "send the decision as Content-Type: application/json",
            )
        try:
            body = json.loads(self._read_body() or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ReviewError(f"the body is not valid JSON ({exc})") from None
        self._json(self.server.app.review(body))

    def _send_media(self, data: bytes, kind: str) -> None:
        """Whole, or the one byte range a media element asks for (browsers seek with ranges)."""
        ranged = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range") or "")
        if not ranged or not (ranged[1] or ranged[2]):
            self._send(data, kind, extra={"Accept-Ranges": "bytes"})
            return
        size = len(data)
        start, end = ranged[1], ranged[2]
        first = int(start) if start else max(0, size - int(end))
        last = min(int(end), size - 1) if start and end else size - 1
        if first >= size or first > last:
            self._send(
                b"",
                kind,
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                {"Content-Range": f"bytes */{size}"},
            )
            return
        self._send(
            data[first : last + 1],
            kind,
            HTTPStatus.PARTIAL_CONTENT,
            {"Accept-Ranges": "bytes", "Content-Range": f"bytes {first}-{last}/{size}"},
        )

    def _json(self, data, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(json.dumps(data, default=str).encode(), "application/json", status)

    def _send(
        self, data: bytes, kind: str, status: HTTPStatus = HTTPStatus.OK, extra: dict | None = None
    ) -> None:
        self.send_response(status)
        if not self._keeps_connection():
            self.send_header("Connection", "close")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def log_error(self, format: str, *args) -> None:
        log.warning("%s " + format, self.address_string(), *args)


class _Refused(Exception):
    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 resets connections when a page or a script sends a
    # burst of requests (thumbnails, parallel decisions)
    request_queue_size = 128

    def __init__(self, app: ReviewApp, port: int = DEFAULT_PORT):
        super().__init__((HOST, port), ReviewHandler)
        self.app = app

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"


def make_server(path: str | Path, port: int = DEFAULT_PORT, ip: str | None = None) -> ReviewServer:
    """The server for a film or dataset folder (port 0: any free port); `serve_forever()` runs it."""
    return ReviewServer(ReviewApp(path, ip), port)


__all__ = [
    "DEFAULT_PORT",
    "DatasetError",
    "ReviewApp",
    "ReviewServer",
    "check_fields",
    "make_server",
]
