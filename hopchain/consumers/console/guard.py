"""What a mutating form of the console must carry: a CSRF proof and the token, typed in.

CSRF uses a signed double submit: the browser holds a random nonce in an HttpOnly,
``SameSite=Strict`` cookie, and every form carries ``HMAC(process key, nonce)``. A page on
another site can make the browser send the cookie (not with ``Strict``, but older browsers
exist) yet cannot read the page to learn the form value, and cannot compute it without
the process's key. The key is random per process: a restart only asks people to reload.

The bearer token is never put into a page or a cookie: the person types it into the form
each time, and it is compared in constant time. Order of refusals, as for the JSON
endpoints: 403 while no token is configured, 403 without a valid CSRF proof, 401 for a
missing or wrong token.

Reading needs the token too once one is configured, as ``GET /dead-letters`` does: a
person signs in by typing it once, and the browser then holds a session cookie, an HMAC of
the request's nonce and a digest of the token under the process's key. It proves the token
was typed in this browser without being the token; it stops working when the service
restarts or the token changes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs

from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import Response

from hopchain.consumers.api import Refusal, read_body, token_matches

__all__ = ["CSRF_COOKIE", "CSRF_FIELD", "SESSION_COOKIE", "CsrfGuard", "Form", "read_form"]

CSRF_COOKIE = "hopchain_csrf"
"""The cookie holding the nonce."""
SESSION_COOKIE = "hopchain_session"
"""The cookie saying that this browser signed in with the token."""
CSRF_FIELD = "csrf"
"""The form field holding the nonce's signature."""
_NONCE = re.compile(r"^[0-9a-f]{64}$")
_MAX_FIELDS = 40


@dataclass
class CsrfGuard:
    """Signs nonces with a key of this process's own."""

    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def nonce(self, request: Request) -> tuple[str, bool]:
        """The request's nonce, and whether it is new (then the response must set it)."""
        found = request.cookies.get(CSRF_COOKIE, "")
        if _NONCE.match(found):
            return found, False
        return secrets.token_hex(32), True

    def sign(self, nonce: str) -> str:
        """The form value proving a form was served by this process to this browser."""
        return hmac.new(self.key, nonce.encode(), hashlib.sha256).hexdigest()

    def session(self, nonce: str, token: SecretStr) -> str:
        """The session cookie's value for a browser that typed ``token``."""
        digest = hashlib.sha256(token.get_secret_value().encode()).hexdigest()
        return hmac.new(self.key, f"session:{nonce}:{digest}".encode(), hashlib.sha256).hexdigest()

    def signed_in(self, request: Request, token: SecretStr) -> bool:
        """Whether the request carries a session made with ``token`` for its nonce."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        given = request.cookies.get(SESSION_COOKIE, "")
        if not _NONCE.match(nonce) or not given:
            return False
        return hmac.compare_digest(given.encode(), self.session(nonce, token).encode())

    def start_session(self, response: Response, request: Request, token: SecretStr) -> None:
        """Remember in the browser that it signed in (for the life of the nonce cookie)."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        response.set_cookie(
            SESSION_COOKIE,
            self.session(nonce, token),
            httponly=True,
            samesite="strict",
            path="/ui",
            secure=request.url.scheme == "https",
        )

    @staticmethod
    def set_cookie(response: Response, nonce: str) -> None:
        """Give the browser its nonce (never readable by a script)."""
        response.set_cookie(
            CSRF_COOKIE, nonce, httponly=True, samesite="strict", path="/ui", secure=False
        )

    def check(self, request: Request, form: Form) -> None:
        """Refuse a form without a valid proof.

        Raises:
            Refusal: 403 when the cookie or the form field is missing or does not match.
        """
        nonce = request.cookies.get(CSRF_COOKIE, "")
        given = form.get(CSRF_FIELD)
        if not _NONCE.match(nonce) or not given:
            raise Refusal(
                HTTPStatus.FORBIDDEN,
                "this form carries no CSRF proof (or the browser sent no console cookie); "
                "reload the page and submit it again",
            )
        if not hmac.compare_digest(given.encode(), self.sign(nonce).encode()):
            raise Refusal(
                HTTPStatus.FORBIDDEN,
                "this form's CSRF proof does not match (the service restarted, or the form "
                "came from elsewhere); reload the page and submit it again",
            )


class Form:
    """A URL-encoded form: the last value of each field."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self._fields = fields

    def get(self, name: str, default: str | None = None) -> str | None:
        """The field's value, stripped; ``default`` when absent or blank."""
        values = self._fields.get(name)
        if not values or not values[-1].strip():
            return default
        return values[-1].strip()

    def flag(self, name: str) -> bool:
        """Whether a checkbox was ticked."""
        return self.get(name) in {"1", "on", "true", "yes"}


async def read_form(request: Request) -> Form:
    """Parse an ``application/x-www-form-urlencoded`` body (at most 64 KiB).

    Raises:
        Refusal: 415 for another content type, 400 for a body that is not a form.
    """
    kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refusal(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the form as url-encoded fields")
    raw = await read_body(request)
    try:
        fields = parse_qs(
            raw.decode(), keep_blank_values=True, strict_parsing=False, max_num_fields=_MAX_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise Refusal(HTTPStatus.BAD_REQUEST, "the form is not url-encoded UTF-8 text") from None
    return Form(fields)


def check_token(configured: SecretStr | None, form: Form) -> None:
    """Refuse a form without the configured token.

    Raises:
        Refusal: 403 while no token is configured, 401 for a missing or wrong one.
    """
    if configured is None:
        raise Refusal(
            HTTPStatus.FORBIDDEN,
            "redrive and discard are disabled: no HOPCHAIN_DLQ_TOKEN is configured",
        )
    given = form.get("token") or ""
    if not given or not token_matches(configured.get_secret_value(), given):
        raise Refusal(
            HTTPStatus.UNAUTHORIZED, "the token is missing or wrong; type HOPCHAIN_DLQ_TOKEN"
        )
