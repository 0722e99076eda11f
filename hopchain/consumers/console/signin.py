"""Signing in to the console: the token typed once per browser, before anything is shown.

While no token is configured the console is open to read, as ``/dead-letters`` is. Once
one is, every page asks for it first (``401`` with a sign-in form), so a dead letter's
payload and headers are never shown to someone who could not also list them through the
JSON endpoints.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from hopchain.consumers.api import backend_of
from hopchain.consumers.console.guard import check_token, read_form
from hopchain.consumers.console.pages import console_state, render

__all__ = ["require_session", "sign_in"]

_HOME = "/ui"


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only, never another site."""
    if target is None or not target.startswith(_HOME) or target.startswith("//"):
        return _HOME
    if any(char in target for char in "\\\r\n"):
        return _HOME
    return target


def require_session(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """Show the sign-in form instead of ``handler``'s page to a browser not signed in."""

    async def endpoint(request: Request) -> Response:
        token = backend_of(request).token
        if token is None or console_state(request).guard.signed_in(request, token):
            return await handler(request)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return render(request, "sign_in.html", HTTPStatus.UNAUTHORIZED, next=_safe_next(target))

    return endpoint


async def sign_in(request: Request) -> Response:
    """Check the typed token (and the CSRF proof), then go where the person was going."""
    backend = backend_of(request)
    form = await read_form(request)
    state = console_state(request)
    state.guard.check(request, form)
    check_token(backend.token, form)
    response = RedirectResponse(_safe_next(form.get("next")), status_code=HTTPStatus.SEE_OTHER)
    if backend.token is not None:
        state.guard.start_session(response, request, backend.token)
    return response
