"""The dead-letter consumer's HTTP endpoints, on the standard library's threading server.

=========================================  =====================================================
``GET /metrics``                           Prometheus exposition of the injected registry
                                           (without ``_created`` series, see
                                           :mod:`hopchain.consumers.exposition`)
``GET /healthz``                           200 while the consumer loop is alive, else 503
``GET /readyz``                            200 once caught up to the start-up end offsets
``GET /dead-letters``                      unresolved dead letters as JSON (``owner``,
                                           ``source_topic``, ``dead_letter_topic``,
                                           ``error_type``, ``min_age``, ``all``, ``limit``
                                           (1000) query parameters), oldest first
``GET /dead-letters/{id}``                 one dead letter and its resolution
``POST /dead-letters/{id}/discard``        body ``{"who", "reason", "force"}``
``POST /dead-letters/{id}/redrive``        body ``{"who", "reason", "force"}``
=========================================  =====================================================

The POST endpoints need ``Authorization: Bearer <HOPCHAIN_DLQ_TOKEN>``: 401 without it, and
403 for every request while no token is configured (they are disabled). Requests run in the
server's threads; redrive and discard are handed to the consumer's event loop.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import SecretStr

from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.exposition import WithoutCreated
from hopchain.consumers.filters import DeadLetterFilter, parse_duration
from hopchain.consumers.index import DeadLetterIndex
from hopchain.consumers.resolutions import Resolution
from hopchain.consumers.triage import Triage

__all__ = ["DlqHttpServer", "HttpBackend"]

logger = logging.getLogger("hopchain.dlq.http")

_MAX_BODY = 64 * 1024
_MAX_REASON = 1000
_DEFAULT_LIMIT = 1000
_JSON = "application/json"


@dataclass
class HttpBackend:
    """What the endpoints read and call.

    Attributes:
        registry: the metrics to expose.
        index: the dead letters.
        triage: redrive and discard.
        alive: whether the consumer loop runs.
        ready: whether it caught up.
        run: runs a coroutine on the consumer's event loop and returns its result
            (called from a server thread).
        token: the bearer token of the mutating endpoints, or None to disable them.
        operation_timeout: seconds a redrive or discard may take.
    """

    registry: CollectorRegistry
    index: DeadLetterIndex
    triage: Triage
    alive: Callable[[], bool]
    ready: Callable[[], bool]
    run: Callable[[Coroutine[Any, Any, Any], float], Any]
    token: SecretStr | None
    operation_timeout: float = 60.0


class _Refusal(Exception):  # noqa: N818 - a control-flow signal carrying an HTTP answer
    def __init__(self, status: HTTPStatus, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def _resolution_json(resolution: Resolution | None) -> Any:
    return None if resolution is None else json.loads(resolution.model_dump_json())


class _Handler(BaseHTTPRequestHandler):
    backend: HttpBackend
    server_version = "hopchain-dlq"
    protocol_version = "HTTP/1.1"

    # -- plumbing ----------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(
        self, status: HTTPStatus, body: bytes, content_type: str, headers: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: HTTPStatus, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body, sort_keys=True).encode() + b"\n", _JSON, headers)

    def _error(self, status: HTTPStatus, message: str) -> None:
        # An unread request body would be taken for the next request: close instead.
        self.close_connection = True
        headers = {"Connection": "close"}
        if status is HTTPStatus.UNAUTHORIZED:
            headers["WWW-Authenticate"] = 'Bearer realm="hopchain-dlq"'
        self._json(status, {"error": message, "status": status.value}, headers)

    def _route(self, method: str) -> None:
        try:
            parts = urlsplit(self.path)
            segments = [unquote(part) for part in parts.path.strip("/").split("/") if part]
            self._dispatch(method, segments, parse_qs(parts.query))
        except _Refusal as refusal:
            self._error(refusal.status, refusal.message)
        except Exception:
            logger.exception("%s %s failed", method, self.path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the service log")

    def do_GET(self) -> None:
        """Answer a GET."""
        self._route("GET")

    def do_HEAD(self) -> None:
        """Answer a HEAD like a GET, without a body."""
        self._route("GET")

    def do_POST(self) -> None:
        """Answer a POST."""
        self._route("POST")

    # -- routes ------------------------------------------------------------------------------

    def _dispatch(self, method: str, segments: list[str], query: dict[str, list[str]]) -> None:
        backend = self.backend
        if method == "POST":
            self._authorize()
            if len(segments) == 3 and segments[0] == "dead-letters":  # noqa: PLR2004
                self._resolve(segments[1], segments[2])
                return
            raise _Refusal(HTTPStatus.NOT_FOUND, f"no POST endpoint at {self.path}")
        match segments:
            case ["metrics"]:
                self._send(
                    HTTPStatus.OK,
                    generate_latest(WithoutCreated(backend.registry)),
                    CONTENT_TYPE_LATEST,
                    None,
                )
            case ["healthz"]:
                alive = backend.alive()
                status = HTTPStatus.OK if alive else HTTPStatus.SERVICE_UNAVAILABLE
                self._json(status, {"alive": alive})
            case ["readyz"]:
                ready = backend.ready()
                status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
                self._json(status, {"ready": ready, **backend.index.counts()})
            case ["dead-letters"]:
                self._list(query)
            case ["dead-letters", dead_letter_id]:
                found = backend.index.get(dead_letter_id)
                if found is None:
                    raise _Refusal(HTTPStatus.NOT_FOUND, str(DeadLetterNotFound(dead_letter_id)))
                letter, resolution = found
                self._json(
                    HTTPStatus.OK,
                    {**letter.as_json(), "resolution": _resolution_json(resolution)},
                )
            case _:
                raise _Refusal(HTTPStatus.NOT_FOUND, f"no endpoint at {self.path}")

    def _list(self, query: dict[str, list[str]]) -> None:
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values else None

        try:
            min_age = one("min_age")
            chosen = DeadLetterFilter(
                owner=one("owner"),
                source_topic=one("source_topic"),
                dead_letter_topic=one("dead_letter_topic"),
                error_type=one("error_type"),
                min_age_seconds=parse_duration(min_age) if min_age is not None else None,
            )
        except ValueError as exc:
            raise _Refusal(HTTPStatus.BAD_REQUEST, str(exc)) from None
        include_resolved = one("all") in {"1", "true", "yes"}
        raw_limit = one("limit") or str(_DEFAULT_LIMIT)
        if not raw_limit.isdigit() or int(raw_limit) < 1:
            raise _Refusal(HTTPStatus.BAD_REQUEST, "limit must be a positive whole number")
        letters = self.backend.index.select(chosen.predicate(), include_resolved=include_resolved)
        self._json(
            HTTPStatus.OK,
            [
                {**letter.as_json(), "resolution": _resolution_json(resolution)}
                for letter, resolution in letters[: int(raw_limit)]
            ],
        )

    def _authorize(self) -> None:
        token = self.backend.token
        if token is None:
            raise _Refusal(
                HTTPStatus.FORBIDDEN,
                "mutating endpoints are disabled: no HOPCHAIN_DLQ_TOKEN is configured",
            )
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise _Refusal(
                HTTPStatus.UNAUTHORIZED, "send 'Authorization: Bearer <HOPCHAIN_DLQ_TOKEN>'"
            )

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _Refusal(HTTPStatus.BAD_REQUEST, "Content-Length is not a number") from None
        if length > _MAX_BODY:
            raise _Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {_MAX_BODY} bytes")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw)
        except ValueError:
            raise _Refusal(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _Refusal(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        return body

    def _resolve(self, dead_letter_id: str, action: str) -> None:
        if action not in {"discard", "redrive"}:
            raise _Refusal(HTTPStatus.NOT_FOUND, f"no action {action!r}; use discard or redrive")
        body = self._body()
        who, reason, force = body.get("who"), body.get("reason"), body.get("force", False)
        if not isinstance(who, str) or not who.strip() or len(who) > 200:  # noqa: PLR2004
            raise _Refusal(HTTPStatus.BAD_REQUEST, "'who' (who is doing this) is required")
        if not isinstance(reason, str) or not reason.strip() or len(reason) > _MAX_REASON:
            raise _Refusal(
                HTTPStatus.BAD_REQUEST, f"'reason' (why, 1-{_MAX_REASON} characters) is required"
            )
        if not isinstance(force, bool):
            raise _Refusal(HTTPStatus.BAD_REQUEST, "'force' must be true or false")
        triage = self.backend.triage
        try:
            if action == "discard":
                resolution = self.backend.run(
                    triage.discard(dead_letter_id, who=who, reason=reason, force=force),
                    self.backend.operation_timeout,
                )
            else:
                resolution = self.backend.run(
                    triage.redrive(dead_letter_id, who=who, reason=reason, force=force),
                    self.backend.operation_timeout,
                ).resolution
        except DeadLetterNotFound as exc:
            raise _Refusal(HTTPStatus.NOT_FOUND, str(exc)) from None
        except TriageRefused as exc:
            raise _Refusal(HTTPStatus.CONFLICT, str(exc)) from None
        except TriageError as exc:
            raise _Refusal(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from None
        self._json(HTTPStatus.OK, _resolution_json(resolution))


class DlqHttpServer:
    """A threading HTTP server serving :class:`HttpBackend`'s endpoints.

    Args:
        backend: what the endpoints read and call.
        host: address to bind (127.0.0.1 by default in the settings).
        port: port to bind; 0 picks a free one (see :attr:`port`).
    """

    def __init__(self, backend: HttpBackend, host: str, port: int) -> None:
        handler = type("DlqHandler", (_Handler,), {"backend": backend})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        """The bound address."""
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="hopchain-dlq-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()
