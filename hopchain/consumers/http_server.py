"""The dead-letter consumer's HTTP side: JSON endpoints and the console, on Starlette + uvicorn.

=========================================  =====================================================
``GET /openapi.json``                      the OpenAPI 3.1 document of the JSON endpoints below
``GET /metrics``                           Prometheus exposition of the injected registry
``GET /healthz``                           200 while the consumer loop is alive, else 503
``GET /readyz``                            200 once caught up to the start-up end offsets
``GET /dead-letters``                      unresolved dead letters as JSON (``owner``,
                                           ``source_topic``, ``dead_letter_topic``,
                                           ``error_type``, ``min_age``, ``all``, ``limit``
                                           (1000, also the most allowed), ``offset`` (0)
                                           query parameters), oldest first
``GET /dead-letters/{id}``                 one dead letter and its resolution
``GET /dead-letters/{id}/payload``         its record's key and value; a value framed for a
                                           schema registry decoded, with schema id and subject
``POST /dead-letters/{id}/discard``        body ``{"who", "reason", "force"}``
``POST /dead-letters/{id}/redrive``        body ``{"who", "reason", "force"}``
``GET /ui/...``                            the console (:mod:`hopchain.consumers.console`)
=========================================  =====================================================

The JSON POST endpoints need ``Authorization: Bearer <HOPCHAIN_DLQ_TOKEN>``: 401 without it,
and 403 for every request while no token is configured (they are disabled); they answer 503
until the service is ready, so that nothing is redriven before its resolution was read.
While a token is configured, the ``GET /dead-letters`` endpoints need it too. The token
travels in a header: serve it over TLS (``HOPCHAIN_DLQ_TLS_CERTFILE``) or bind loopback
behind a TLS-terminating proxy, never plain HTTP on a shared network.

Why Starlette on uvicorn, served inside the service's own event loop: the index, the Kafka
consumer and the triage producer all live on that loop, so a request reads the index and
awaits a redrive directly, with no thread hand-off and no second loop to keep in step (the
standard library's threading server needed both). uvicorn is started with
``Server.serve`` as one more task of the service and leaves the process's signals to the
service. The app is plain ASGI, so tests can also drive it in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hopchain.consumers.api import api_routes, not_found
from hopchain.consumers.backend import HttpBackend

__all__ = ["SECURITY_HEADERS", "DlqHttpServer", "HttpBackend", "build_app"]

logger = logging.getLogger("hopchain.dlq.http")

SECURITY_HEADERS: dict[str, str] = {
    # No script at all: the console is plain server-rendered HTML and CSS.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""Headers on every response, JSON or HTML."""

_SHUTDOWN_SECONDS = 5.0


class SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the headers to the response's start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in self._headers if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


async def _to_console(_: Request) -> Response:
    return RedirectResponse("/ui", status_code=303)


def build_app(backend: HttpBackend) -> Starlette:
    """The ASGI app: JSON endpoints, the console under ``/ui``, security headers."""
    from hopchain.consumers.console import console_routes  # noqa: PLC0415 - starlette pages load on use

    routes: list[BaseRoute] = [
        Route("/", _to_console, methods=["GET"]),
        *api_routes(),
        *console_routes(),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    app.state.backend = backend
    app.add_middleware(SecurityHeaders)
    return app


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the service owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, reuse_port=False)
    sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
    return sock


class DlqHttpServer:
    """uvicorn serving :func:`build_app` as a task of the running event loop.

    Args:
        backend: what the endpoints read and call.
        host: address to bind (127.0.0.1 by default in the settings).
        port: port to bind; 0 picks a free one (see :attr:`port`).
        certfile, keyfile: PEM certificate and key to serve HTTPS with (plain HTTP if None).
    """

    def __init__(
        self,
        backend: HttpBackend,
        host: str,
        port: int,
        *,
        certfile: str | None = None,
        keyfile: str | None = None,
    ) -> None:
        self.app = build_app(backend)
        self.scheme = "https" if certfile is not None else "http"
        self._socket = _bind(host, port)
        config = uvicorn.Config(
            self.app,
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            log_config=None,
            access_log=False,
            lifespan="off",
            ws="none",
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=int(_SHUTDOWN_SECONDS),
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def host(self) -> str:
        """The bound address."""
        return str(self._socket.getsockname()[0])

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._socket.getsockname()[1])

    async def start(self) -> None:
        """Serve on the running loop; returns once the socket accepts connections."""
        self._task = asyncio.create_task(
            self._server.serve(sockets=[self._socket]), name="hopchain-dlq-http"
        )
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the HTTP server stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish, close the socket."""
        if self._task is not None:
            self._server.should_exit = True
            try:
                async with asyncio.timeout(_SHUTDOWN_SECONDS * 2):
                    await self._task
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None
        self._socket.close()
