"""The JSON endpoints of the dead-letter consumer (listed in :mod:`~.http_server`).

Answers and status codes are those of the service's first HTTP server: JSON bodies with
sorted keys, errors as ``{"error", "status"}``, 401 with ``WWW-Authenticate``, 403 for
every POST while no token is configured. Redrive and discard are awaited on the service's
own event loop.

``openapi.json`` beside this module describes every endpoint here (served at
``/openapi.json``); tests/consumers/test_openapi.py holds the service to it by fuzzing it.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hopchain.consumers.detail import inspect_dead_letter, with_payload
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.exposition import WithoutCreated
from hopchain.consumers.filters import DeadLetterFilter, parse_duration
from hopchain.consumers.resolutions import Resolution

if TYPE_CHECKING:
    from hopchain.consumers.backend import HttpBackend

__all__ = ["OPENAPI_DOCUMENT", "Refusal", "api_routes", "backend_of", "json_response", "not_found"]

logger = logging.getLogger("hopchain.dlq.http")

MAX_BODY = 64 * 1024
"""Largest request body read, JSON or form."""
_MAX_REASON = 1000
_MAX_WHO = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""What a name may not hold: a resolution's ``who`` is one line of printable text."""
_DEFAULT_LIMIT = 1000
MAX_LIMIT = 1000
"""Most dead letters one ``GET /dead-letters`` returns; a larger ``limit`` is refused (400)."""
MAX_OFFSET = 2**63 - 1
"""Largest ``offset`` of ``GET /dead-letters`` (Kafka's own largest offset); larger is 400."""


OPENAPI_DOCUMENT = Path(__file__).with_name("openapi.json")
"""The OpenAPI document of these endpoints, shipped in the package and served as it is."""
_OPENAPI = OPENAPI_DOCUMENT.read_bytes()


class Refusal(Exception):  # noqa: N818 - a control-flow signal carrying an HTTP answer
    """An answer other than 200, with the message the caller is shown."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def backend_of(request: Request) -> HttpBackend:
    """The backend the app was built with."""
    backend: HttpBackend = request.app.state.backend
    return backend


def json_response(status: HTTPStatus, body: Any, headers: dict[str, str] | None = None) -> Response:
    """``body`` as JSON with sorted keys and a final newline."""
    return Response(
        json.dumps(body, sort_keys=True).encode() + b"\n",
        status_code=status.value,
        media_type="application/json",
        headers=headers,
    )


def _error(status: HTTPStatus, message: str) -> Response:
    headers = {"Connection": "close"}
    if status is HTTPStatus.UNAUTHORIZED:
        headers["WWW-Authenticate"] = 'Bearer realm="hopchain-dlq"'
    return json_response(status, {"error": message, "status": status.value}, headers)


def _guarded(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except Refusal as refusal:
            return _error(refusal.status, refusal.message)
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the service log")

    return endpoint


async def not_found(request: Request, exc: Exception) -> Response:
    """404 (and 405) as JSON; a POST is authorised first, as every POST always was."""
    if request.method == "POST" and not request.url.path.startswith("/ui"):
        try:
            authorize(backend_of(request), request.headers.get("Authorization"))
        except Refusal as refusal:
            return _error(refusal.status, refusal.message)
    del exc  # a path served for another method is answered 404, as it always was
    detail = f"no endpoint at {request.url.path}"
    if request.method == "POST":
        detail = f"no POST endpoint at {request.url.path}"
    return _error(HTTPStatus.NOT_FOUND, detail)


def authorize(backend: HttpBackend, header: str | None) -> None:
    """Check ``Authorization: Bearer <token>``.

    Raises:
        Refusal: 403 while no token is configured, 401 for a missing or wrong token.
    """
    token = backend.token
    if token is None:
        raise Refusal(
            HTTPStatus.FORBIDDEN,
            "mutating endpoints are disabled: no HOPCHAIN_DLQ_TOKEN is configured",
        )
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token_matches(token.get_secret_value(), given.strip()):
        raise Refusal(HTTPStatus.UNAUTHORIZED, "send 'Authorization: Bearer <HOPCHAIN_DLQ_TOKEN>'")


def authorize_read(backend: HttpBackend, header: str | None) -> None:
    """Check the bearer token of a read that shows dead letters, when a token is configured.

    Raises:
        Refusal: 401 for a missing or wrong token while one is configured.
    """
    if backend.token is not None:
        authorize(backend, header)


def require_ready(backend: HttpBackend) -> None:
    """Refuse a mutation while the index is still being rebuilt.

    Until then a dead letter's resolution may not have been read yet, so a redrive could
    send a record that was redriven already.

    Raises:
        Refusal: 503 until the service is ready.
    """
    if not backend.ready():
        raise Refusal(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "the service is still reading the dead-letter and resolutions topics (see "
            "/readyz); redrive and discard are refused until it has caught up",
        )


def token_matches(expected: str, given: str) -> bool:
    """Compare in constant time."""
    return hmac.compare_digest(given.encode(), expected.encode())


def _resolution_json(resolution: Resolution | None) -> Any:
    return None if resolution is None else json.loads(resolution.model_dump_json())


async def _openapi(_: Request) -> Response:
    return Response(_OPENAPI, media_type="application/json")


async def _metrics(request: Request) -> Response:
    body = generate_latest(WithoutCreated(backend_of(request).registry))
    return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: Request) -> Response:
    alive = backend_of(request).alive()
    return json_response(
        HTTPStatus.OK if alive else HTTPStatus.SERVICE_UNAVAILABLE, {"alive": alive}
    )


async def _readyz(request: Request) -> Response:
    backend = backend_of(request)
    ready = backend.ready()
    status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
    return json_response(status, {"ready": ready, **backend.index.counts()})


async def _list(request: Request) -> Response:
    authorize_read(backend_of(request), request.headers.get("Authorization"))
    query = request.query_params
    try:
        min_age = query.get("min_age")
        chosen = DeadLetterFilter(
            owner=query.get("owner"),
            source_topic=query.get("source_topic"),
            dead_letter_topic=query.get("dead_letter_topic"),
            error_type=query.get("error_type"),
            min_age_seconds=parse_duration(min_age) if min_age is not None else None,
        )
    except ValueError as exc:
        raise Refusal(HTTPStatus.BAD_REQUEST, str(exc)) from None
    include_resolved = query.get("all") in {"1", "true", "yes"}
    limit = _whole_number(query.get("limit"), _DEFAULT_LIMIT, 1, MAX_LIMIT)
    if limit is None:
        raise Refusal(HTTPStatus.BAD_REQUEST, f"limit must be a whole number from 1 to {MAX_LIMIT}")
    start = _whole_number(query.get("offset"), 0, 0, MAX_OFFSET)
    if start is None:
        raise Refusal(
            HTTPStatus.BAD_REQUEST, f"offset must be a whole number from 0 to {MAX_OFFSET}"
        )
    index = backend_of(request).index
    after = None
    if query.get("after"):
        found = index.get(query["after"])
        if found is None:
            raise Refusal(
                HTTPStatus.BAD_REQUEST,
                f"after: no dead letter {query['after']!r}; pass the id of the last dead "
                "letter of the page before",
            )
        after = (found[0].parked_at, found[0].dead_letter_id)
    letters = index.scan(chosen, resolved=None if include_resolved else False, after=after)
    return json_response(
        HTTPStatus.OK,
        [
            {**letter.as_json(), "resolution": _resolution_json(resolution)}
            for letter, resolution in itertools.islice(
                letters, start, min(start + limit, sys.maxsize)
            )
        ],
    )


def _whole_number(raw: str | None, default: int, low: int, high: int) -> int | None:
    """A query parameter's whole number (ASCII digits) from ``low`` to ``high``; None if not."""
    if not raw:
        return default
    # str.isdigit alone takes "²", which int() refuses, as it refuses 4,301 digits or more.
    if not (raw.isascii() and raw.isdigit()) or len(raw.lstrip("0")) > len(str(high)):
        return None
    value = int(raw)
    return value if low <= value <= high else None


async def _show(request: Request) -> Response:
    authorize_read(backend_of(request), request.headers.get("Authorization"))
    dead_letter_id = request.path_params["dead_letter_id"]
    found = backend_of(request).index.get(dead_letter_id)
    if found is None:
        raise Refusal(HTTPStatus.NOT_FOUND, str(DeadLetterNotFound(dead_letter_id)))
    letter, resolution = found
    return json_response(
        HTTPStatus.OK, {**letter.as_json(), "resolution": _resolution_json(resolution)}
    )


async def _payload(request: Request) -> Response:
    """One dead letter's record, as ``dlq show --json --payload`` prints it.

    A value framed for a schema registry is decoded with its schema (``registry``).
    """
    backend = backend_of(request)
    authorize_read(backend, request.headers.get("Authorization"))
    dead_letter_id = request.path_params["dead_letter_id"]
    found = backend.index.get(dead_letter_id)
    if found is None:
        raise Refusal(HTTPStatus.NOT_FOUND, str(DeadLetterNotFound(dead_letter_id)))
    letter, resolution = found
    try:
        async with asyncio.timeout(backend.operation_timeout):
            record = await backend.triage.fetch(letter)
    except TriageError as exc:
        raise Refusal(HTTPStatus.NOT_FOUND, str(exc)) from None
    except TimeoutError:
        raise Refusal(
            HTTPStatus.SERVICE_UNAVAILABLE, "the record could not be read in time"
        ) from None
    detail = inspect_dead_letter(record, letter, resolution)
    # A blocking lookup in the registry, off the event loop; it never raises.
    detail = await asyncio.to_thread(
        with_payload, detail, backend.triage.settings.schema_registry_url
    )
    return json_response(
        HTTPStatus.OK, {"id": letter.dead_letter_id, **detail.as_json(include_value=True)["record"]}
    )


async def read_body(request: Request) -> bytes:
    """The request body, refused past :data:`MAX_BODY` bytes."""
    declared = request.headers.get("Content-Length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
    return body


def check_resolution_fields(who: object, reason: object, force: object) -> tuple[str, str, bool]:
    """Who, why and whether forced, as a redrive or discard needs them.

    Raises:
        Refusal: 400 naming the missing or malformed field.
    """
    if (
        not isinstance(who, str)
        or not who.strip()
        or len(who) > _MAX_WHO
        or _CONTROL.search(who) is not None
    ):
        raise Refusal(
            HTTPStatus.BAD_REQUEST,
            f"'who' (who is doing this: one line of text, 1-{_MAX_WHO} characters) is required",
        )
    if not isinstance(reason, str) or not reason.strip() or len(reason) > _MAX_REASON:
        raise Refusal(
            HTTPStatus.BAD_REQUEST, f"'reason' (why, 1-{_MAX_REASON} characters) is required"
        )
    if not isinstance(force, bool):
        raise Refusal(HTTPStatus.BAD_REQUEST, "'force' must be true or false")
    return who.strip(), reason.strip(), force


async def resolve(
    backend: HttpBackend, dead_letter_id: str, action: str, who: str, reason: str, *, force: bool
) -> Resolution:
    """Redrive or discard one dead letter through the triage (the CLI's rules).

    Raises:
        Refusal: 503 not ready yet, 404 unknown, 409 refused by policy, 422 cannot be done.
    """
    require_ready(backend)
    triage = backend.triage
    try:
        async with asyncio.timeout(backend.operation_timeout):
            if action == "discard":
                return await triage.discard(dead_letter_id, who=who, reason=reason, force=force)
            redriven = await triage.redrive(dead_letter_id, who=who, reason=reason, force=force)
            return redriven.resolution
    except DeadLetterNotFound as exc:
        raise Refusal(HTTPStatus.NOT_FOUND, str(exc)) from None
    except TriageRefused as exc:
        raise Refusal(HTTPStatus.CONFLICT, str(exc)) from None
    except TriageError as exc:
        raise Refusal(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from None


async def _resolve(request: Request) -> Response:
    backend = backend_of(request)
    authorize(backend, request.headers.get("Authorization"))
    action = request.path_params["action"]
    if action not in {"discard", "redrive"}:
        raise Refusal(HTTPStatus.NOT_FOUND, f"no action {action!r}; use discard or redrive")
    raw = await read_body(request) or b"{}"
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
        raise Refusal(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise Refusal(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    who, reason, force = check_resolution_fields(
        body.get("who"), body.get("reason"), body.get("force", False)
    )
    resolution = await resolve(
        backend, request.path_params["dead_letter_id"], action, who, reason, force=force
    )
    return json_response(HTTPStatus.OK, _resolution_json(resolution))


def api_routes() -> list[BaseRoute]:
    """The JSON endpoints."""
    return [
        Route("/openapi.json", _openapi, methods=["GET"]),
        Route("/metrics", _guarded(_metrics), methods=["GET"]),
        Route("/healthz", _guarded(_healthz), methods=["GET"]),
        Route("/readyz", _guarded(_readyz), methods=["GET"]),
        Route("/dead-letters", _guarded(_list), methods=["GET"]),
        Route("/dead-letters/{dead_letter_id}", _guarded(_show), methods=["GET"]),
        Route("/dead-letters/{dead_letter_id}/payload", _guarded(_payload), methods=["GET"]),
        Route("/dead-letters/{dead_letter_id}/{action}", _guarded(_resolve), methods=["POST"]),
    ]
