"""The dead-letter console: server-rendered pages under ``/ui`` of ``hopchain dlq serve``.

=========================================  =====================================================
``GET /ui``                                depth and oldest age per owner, source topic and
                                           error type (the figures of ``/metrics``), sortable
``GET /ui/dead-letters``                   the list: owner, source topic, error type, minimum
                                           age and status filters, oldest first, paged
``GET /ui/dead-letters/{id}``              one dead letter: failure, payload, hop chain with
                                           integrity, where the record is now, trace link
``GET /ui/dead-letters/{id}/payload``      the record's value, byte for byte, as a download
``POST /ui/dead-letters/{id}/{action}``    redrive or discard it (form)
``GET /ui/bulk``                           preview of a redrive or discard by filter
``POST /ui/bulk``                          do exactly what the preview showed (form)
``POST /ui/sign-in``                       type the token once per browser (form); while a
                                           token is configured, every page asks for it first
=========================================  =====================================================

No script and no build step: HTML from Jinja templates with autoescaping, one CSS file
shipped in the package, security headers on every response (see
:data:`~hopchain.consumers.http_server.SECURITY_HEADERS`). Forms are guarded as
:mod:`.guard` describes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hopchain.consumers.api import Refusal
from hopchain.consumers.console.actions import bulk_action, single_action
from hopchain.consumers.console.pages import (
    bulk_preview,
    letter_page,
    list_page,
    overview,
    payload_download,
    render,
)
from hopchain.consumers.console.signin import require_session, sign_in

__all__ = ["console_routes"]

logger = logging.getLogger("hopchain.dlq.console")

_CSS = (Path(__file__).parent / "static" / "console.css").read_bytes()


async def _stylesheet(_: Request) -> Response:
    # Served from memory: one small file, read once, no file I/O on the loop.
    return Response(_CSS, media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})


def _page(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """Refusals and failures as an HTML page with the right status."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except Refusal as refusal:
            return render(
                request,
                "error.html",
                refusal.status,
                status=refusal.status,
                message=refusal.message,
            )
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            return render(
                request, "error.html", status, status=status, message="see the service log"
            )

    return endpoint


def _read(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A page that shows dead letters: signed-in browsers only, once a token is set."""
    return _page(require_session(handler))


def console_routes() -> list[BaseRoute]:
    """The console's routes, to mount beside the JSON endpoints."""
    return [
        Route("/ui", _read(overview), methods=["GET"]),
        Route("/ui/dead-letters", _read(list_page), methods=["GET"]),
        Route("/ui/dead-letters/{dead_letter_id}", _read(letter_page), methods=["GET"]),
        Route(
            "/ui/dead-letters/{dead_letter_id}/payload", _read(payload_download), methods=["GET"]
        ),
        Route("/ui/dead-letters/{dead_letter_id}/{action}", _page(single_action), methods=["POST"]),
        Route("/ui/bulk", _read(bulk_preview), methods=["GET"]),
        Route("/ui/bulk", _page(bulk_action), methods=["POST"]),
        Route("/ui/sign-in", _page(sign_in), methods=["POST"]),
        Route("/ui/static/console.css", _stylesheet, methods=["GET"]),
    ]
