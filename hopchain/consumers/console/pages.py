"""The console's pages: overview, list, one dead letter, its raw payload, a bulk preview."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from hopchain.consumers.api import Refusal, backend_of
from hopchain.consumers.backend import HttpBackend
from hopchain.consumers.console.guard import CSRF_FIELD, CsrfGuard
from hopchain.consumers.console.views import (
    BULK_LIMIT,
    PAGE_SIZE,
    ListQuery,
    overview_rows,
    payload_view,
    selection_digest,
)
from hopchain.consumers.detail import DeadLetterDetail, inspect_dead_letter, with_payload
from hopchain.consumers.errors import DeadLetterNotFound, TriageError
from hopchain.consumers.filters import age_text, format_age, original_age_text, reason_text
from hopchain.consumers.foreign import foreign_header_text
from hopchain.consumers.letter import ParkedLetter
from hopchain.consumers.records import UNKNOWN, original_headers
from hopchain.consumers.reference import describe_reference
from hopchain.consumers.resolutions import Resolution
from hopchain.lookup import TraceResult, find_record, hop_facts, integrity_of, payload_of
from hopchain.schemas import DEAD_LETTER_SUFFIX
from hopchain.schemas.vocabulary import ErrorType

__all__ = ["BULK_PREVIEW_ROWS", "ConsoleState", "console_state", "render"]

logger = logging.getLogger("hopchain.dlq.console")

BULK_PREVIEW_ROWS = 200
"""Dead letters listed by id on a bulk preview (the count is always exact)."""
_HEADER_PREVIEW = 300
_TRACE_SECONDS = 15.0


@dataclass
class ConsoleState:
    """Templates and the CSRF key of one app."""

    templates: Environment = field(
        default_factory=lambda: Environment(
            loader=PackageLoader("hopchain.consumers.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
    )
    guard: CsrfGuard = field(default_factory=CsrfGuard)


def console_state(request: Request) -> ConsoleState:
    """The app's console state (made on first use)."""
    state: ConsoleState | None = getattr(request.app.state, "console", None)
    if state is None:
        state = request.app.state.console = ConsoleState()
    return state


def render(
    request: Request, template: str, code: HTTPStatus = HTTPStatus.OK, /, **context: Any
) -> HTMLResponse:
    """A page, with the CSRF proof its forms carry (and the cookie, on a first visit)."""
    state = console_state(request)
    backend = backend_of(request)
    nonce, new = state.guard.nonce(request)
    page = state.templates.get_template(template).render(
        csrf_field=CSRF_FIELD,
        csrf=state.guard.sign(nonce),
        mutations=backend.token is not None,
        format_age=format_age,
        age_text=age_text,
        original_age_text=original_age_text,
        reason_text=reason_text,
        **context,
    )
    response = HTMLResponse(page, status_code=code.value)
    if new:
        state.guard.set_cookie(response, nonce)
    return response


def _now(backend: HttpBackend) -> float:
    return backend.clock()


async def overview(request: Request) -> Response:
    """Depth and oldest age per owner, source topic and error type, sortable."""
    backend = backend_of(request)
    sort = request.query_params.get("sort", "age")
    descending = request.query_params.get("order", "desc") != "asc"
    rows = overview_rows(backend.index, _now(backend), sort, descending=descending)
    # A dead-letter topic too small for its source: the command on its source topic's rows.
    fixes = {
        topic.removesuffix(DEAD_LETTER_SUFFIX): command
        for topic, command in backend.topic_fixes().items()
    }
    return render(
        request,
        "overview.html",
        rows=rows,
        topic_fixes=fixes,
        unlisted_fixes={
            topic: command
            for topic, command in sorted(fixes.items())
            if all(row.source_topic != topic for row in rows)
        },
        sort=sort,
        descending=descending,
        counts=backend.index.counts(),
        ready=backend.ready(),
        total_depth=sum(row.depth for row in rows),
    )


def _choices(backend: HttpBackend) -> dict[str, list[str]]:
    groups = backend.index.groups()
    return {
        "owners": sorted({group.labels[0] for group in groups}),
        "source_topics": sorted({group.labels[1] for group in groups}),
        "error_types": [kind.value for kind in ErrorType],
    }


async def list_page(request: Request) -> Response:
    """Dead letters matching the filters, oldest first, a page at a time."""
    backend = backend_of(request)
    query = ListQuery.parse(request.query_params)
    now = _now(backend)
    try:
        total = query.count(backend.index, now)
    except ValueError as exc:
        raise Refusal(HTTPStatus.BAD_REQUEST, f"minimum age: {exc}") from None
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    shown = query.page_of(backend.index, now, page)
    return render(
        request,
        "list.html",
        query=query,
        letters=shown,
        originals=any(letter.source_timestamp is not None for letter, _ in shown),
        total=total,
        page=page,
        pages=pages,
        now=now,
        bulk=query.status == "unresolved" and not query.chosen().is_empty and bool(total),
        **_choices(backend),
    )


def _lookup(backend: HttpBackend, dead_letter_id: str) -> tuple[ParkedLetter, Resolution | None]:
    found = backend.index.get(dead_letter_id)
    if found is None:
        raise Refusal(HTTPStatus.NOT_FOUND, str(DeadLetterNotFound(dead_letter_id)))
    return found


async def _trace(backend: HttpBackend, letter: ParkedLetter, resolution: Resolution | None) -> Any:
    """Where the work item's records are now, found by ``hopchain trace``'s own search."""
    needle = letter.envelope_id or letter.trace_id
    if needle is None:
        return None
    topics = [letter.topic]
    if letter.source_topic != UNKNOWN:
        topics.insert(0, letter.source_topic)
    if resolution is not None and resolution.redrive is not None:
        topics.append(resolution.redrive.topic)
    settings = backend.triage.settings
    try:
        async with asyncio.timeout(_TRACE_SECONDS):
            result: TraceResult = await find_record(
                settings.kafka_bootstrap,
                needle,
                list(dict.fromkeys(topics)),
                keyring=backend.keyring,
                client_options=settings.client_kwargs(),
            )
    except (TimeoutError, OSError, TriageError) as exc:
        return f"could not search the topics: {type(exc).__name__}: {exc or 'no answer in time'}"
    return result


def _hops(detail: DeadLetterDetail, backend: HttpBackend) -> dict[str, Any] | None:
    envelope = detail.envelope
    if envelope is None:
        return None
    record = detail.record
    integrity = integrity_of(
        envelope, backend.keyring, payload_of(record.value, {name for name, _ in record.headers})
    )
    rows = [{"hop": hop, "facts": hop_facts(hop, integrity.broken_at)} for hop in envelope.chain]
    return {"envelope": envelope, "integrity": integrity, "rows": rows}


async def letter_page(request: Request) -> Response:
    """One dead letter: the failure, the payload, the hop chain, where it is now."""
    backend = backend_of(request)
    letter, resolution = _lookup(backend, request.path_params["dead_letter_id"])
    detail: DeadLetterDetail | None = None
    problem: str | None = None
    try:
        async with asyncio.timeout(backend.operation_timeout):
            record = await backend.triage.fetch(letter)
        detail = inspect_dead_letter(record, letter, resolution)
        # A value framed for a schema registry is decoded with its schema (a blocking lookup).
        detail = await asyncio.to_thread(
            with_payload, detail, backend.triage.settings.schema_registry_url
        )
    except (TriageError, TimeoutError, OSError) as exc:
        problem = f"the record could not be read: {exc or 'no answer in time'}"
    headers = []
    if detail is not None:
        for name, raw in original_headers(detail.record.headers):
            text = foreign_header_text(name, raw) or (
                "null" if raw is None else raw.decode(errors="replace")
            )
            cut = text[:_HEADER_PREVIEW] + ("…" if len(text) > _HEADER_PREVIEW else "")
            headers.append((name, cut))
    trace_url = None
    if backend.trace_url is not None and letter.trace_id is not None:
        trace_url = backend.trace_url.replace("{trace_id}", letter.trace_id)
    return render(
        request,
        "letter.html",
        letter=letter,
        resolution=resolution,
        detail=detail,
        problem=problem,
        failure=detail.info.failure if detail is not None and detail.info is not None else None,
        info=detail.info if detail is not None else None,
        payload=payload_view(detail.record.value) if detail is not None else None,
        framed=detail.payload if detail is not None else None,
        headers=headers,
        chain=_hops(detail, backend) if detail is not None else None,
        trace=await _trace(backend, letter, resolution),
        trace_url=trace_url,
        age=age_text(letter, _now(backend)),
        original_age=original_age_text(letter, _now(backend)),
        reference=describe_reference(letter.reference) if letter.reference else None,
        done=request.query_params.get("done"),
    )


async def payload_download(request: Request) -> Response:
    """The record's value, byte for byte, as a file."""
    backend = backend_of(request)
    letter, _ = _lookup(backend, request.path_params["dead_letter_id"])
    try:
        async with asyncio.timeout(backend.operation_timeout):
            record = await backend.triage.fetch(letter)
    except TriageError as exc:
        raise Refusal(HTTPStatus.NOT_FOUND, str(exc)) from None
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in letter.dead_letter_id)
    return Response(
        record.value or b"",
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}.bin"'},
    )


async def bulk_preview(request: Request) -> Response:
    """How many and which dead letters a bulk redrive or discard would touch."""
    backend = backend_of(request)
    action = request.query_params.get("action", "redrive")
    if action not in {"redrive", "discard"}:
        raise Refusal(HTTPStatus.BAD_REQUEST, "action must be redrive or discard")
    query = ListQuery.parse(request.query_params)
    if query.chosen().is_empty:
        raise Refusal(
            HTTPStatus.BAD_REQUEST,
            "choose by owner, source topic, error type or minimum age; refusing to act on "
            "every dead letter at once",
        )
    as_of = _now(backend)
    unresolved = replace(query, status="unresolved", page=1)
    matching = unresolved.count(backend.index, as_of)
    letters = list(itertools.islice(unresolved.scan(backend.index, as_of), BULK_LIMIT))
    ids = [letter.dead_letter_id for letter, _ in letters]
    return render(
        request,
        "bulk.html",
        action=action,
        query=unresolved,
        letters=letters[:BULK_PREVIEW_ROWS],
        total=len(letters),
        matching=matching,
        references=sum(letter.reference is not None for letter, _ in letters),
        digest=selection_digest(ids),
        as_of=f"{as_of:.6f}",
        now=as_of,
    )
