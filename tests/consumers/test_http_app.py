"""The HTTP app in-process (ASGI): routing answers that need no broker."""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr

from hopchain.consumers import DeadLetterIndex, DlqSettings, Triage
from hopchain.consumers.http_server import SECURITY_HEADERS, HttpBackend, build_app
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.records import ParkedLetter


def app(token: str | None = None, index: DeadLetterIndex | None = None) -> Any:
    index = index if index is not None else DeadLetterIndex()
    return build_app(
        HttpBackend(
            registry=DlqMetrics(index).registry,
            index=index,
            triage=Triage(DlqSettings(), index),
            alive=lambda: True,
            ready=lambda: False,
            token=None if token is None else SecretStr(token),
        )
    )


async def request(
    target: Any,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
) -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path.partition("?")[0],
        "raw_path": path.partition("?")[0].encode(),
        "query_string": path.partition("?")[2].encode(),
        "root_path": "",
        "headers": headers or [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await target(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    head = {name.decode(): value.decode() for name, value in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], head, body


async def test_unknown_paths_and_methods_answer_json_404_and_posts_are_authorised_first() -> None:
    status, headers, body = await request(app(), "GET", "/nowhere")
    assert (status, json.loads(body)) == (404, {"error": "no endpoint at /nowhere", "status": 404})
    assert headers["content-type"] == "application/json"
    # A path that exists for POST only is not "method not allowed": it is not there for GET.
    assert (await request(app(), "GET", "/dead-letters/x/redrive"))[0] == 404
    # Every POST meets the token check before anything else.
    assert (await request(app(), "POST", "/metrics"))[0] == 403
    assert (await request(app("secret"), "POST", "/metrics"))[0] == 401
    bearer = [(b"authorization", b"Bearer secret")]
    assert (await request(app("secret"), "POST", "/metrics", bearer))[0] == 404


async def test_every_answer_carries_the_security_headers() -> None:
    for path in ("/healthz", "/ui", "/ui/dead-letters", "/nowhere", "/ui/static/console.css"):
        _, headers, _ = await request(app(), "GET", path)
        for name, value in SECURITY_HEADERS.items():
            if name == "Cache-Control" and path.endswith(".css"):
                continue
            assert headers[name.lower()] == value, (path, name)
    status, headers, _ = await request(app(), "GET", "/")
    assert (status, headers["location"]) == (303, "/ui")


async def test_with_a_token_the_overview_asks_for_it_and_sets_an_httponly_strict_cookie() -> None:
    status, headers, body = await request(app("secret"), "GET", "/ui")

    assert status == 401
    assert b'id="sign-in-form"' in body
    cookie = headers["set-cookie"]
    assert cookie.startswith("hopchain_csrf=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert b"secret" not in body
    assert b"<script" not in body


async def test_a_bulk_preview_acts_on_at_most_the_oldest_thousand() -> None:
    index = DeadLetterIndex()
    for number in range(1001):
        index.add(
            ParkedLetter(
                dead_letter_id=f"id-{number:04d}",
                owner="a",
                source_topic="orders",
                error_type="internal",
                reason=None,
                parked_at=float(number),
                topic="orders.dlq",
                partition=0,
                offset=number,
            )
        )

    status, _, body = await request(app(None, index), "GET", "/ui/bulk?action=discard&owner=a")

    assert status == 200
    assert b'<strong id="preview-count">1000</strong>' in body
    assert b"1001 match; one confirmation acts on the oldest 1000" in body
    assert "… and 800 more.".encode() in body  # 200 listed by id
    assert (await request(app(None, index), "GET", "/ui/bulk?action=discard"))[0] == 400


async def test_malformed_list_parameters_answer_400_never_500() -> None:
    # Each of these once reached int() unchecked: "²" passes str.isdigit, and int() refuses
    # more than 4,300 digits.
    for query in ("limit=%C2%B2", "offset=%C2%B2", f"offset={'9' * 5000}", f"limit={'1' * 5000}"):
        status, headers, body = await request(app(), "GET", f"/dead-letters?{query}")
        assert status == 400, query
        assert headers["content-type"] == "application/json"
        assert json.loads(body)["status"] == 400
    assert (await request(app(), "GET", "/dead-letters?limit=0001000&offset=9"))[0] == 200


async def test_a_malformed_resolution_body_answers_400_never_500() -> None:
    bearer = [(b"authorization", b"Bearer secret")]
    for body in (
        b"[" * 60_000,  # nested deeper than json reads: RecursionError, not ValueError
        json.dumps({"who": "alice\x0f", "reason": "dup"}).encode(),  # not one line of text
        json.dumps({"who": " ", "reason": "dup"}).encode(),
        json.dumps({"who": "alice", "reason": "dup", "force": None}).encode(),
    ):
        status, _, answer = await request(
            app("secret"), "POST", "/dead-letters/x/discard", bearer, body=body
        )
        assert (status, json.loads(answer)["status"]) == (400, 400), body[:40]
