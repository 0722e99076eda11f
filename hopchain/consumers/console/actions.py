"""The console's mutating forms: redrive or discard one dead letter, or a previewed batch.

Every form is checked the same way before anything happens (see :mod:`.guard`): the token
must be configured, the CSRF proof must match, the typed token must be right. The work is
done by :class:`~hopchain.consumers.triage.Triage`, exactly as the CLI and the JSON endpoints
do it: the same refusal of an already resolved dead letter, the same redrive limit (the
loop guard), ``force`` to override both.
"""

from __future__ import annotations

import itertools
import time
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from aiokafka.errors import KafkaError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from hopchain.consumers.api import (
    Refusal,
    backend_of,
    check_resolution_fields,
    require_ready,
    resolve,
)
from hopchain.consumers.backend import HttpBackend
from hopchain.consumers.console.guard import Form, check_token, read_form
from hopchain.consumers.console.pages import console_state, render
from hopchain.consumers.console.views import BULK_LIMIT, ListQuery, selection_digest

__all__ = ["bulk_action", "single_action"]

_ACTIONS = ("redrive", "discard")


async def _checked_form(request: Request, backend: HttpBackend) -> Form:
    form = await read_form(request)
    if backend.token is None:
        check_token(None, form)  # 403: disabled, whatever else the form holds
    console_state(request).guard.check(request, form)
    check_token(backend.token, form)
    return form


def _who_why(form: Form) -> tuple[str, str, bool]:
    return check_resolution_fields(form.get("who"), form.get("reason"), form.flag("force"))


async def single_action(request: Request) -> Response:
    """Redrive or discard one dead letter, then show its page again."""
    backend = backend_of(request)
    action = request.path_params["action"]
    if action not in _ACTIONS:
        raise Refusal(HTTPStatus.NOT_FOUND, f"no action {action!r}; use redrive or discard")
    form = await _checked_form(request, backend)
    who, reason, force = _who_why(form)
    dead_letter_id = request.path_params["dead_letter_id"]
    await resolve(backend, dead_letter_id, action, who, reason, force=force)
    done = "redriven" if action == "redrive" else "discarded"
    return RedirectResponse(
        f"/ui/dead-letters/{quote(dead_letter_id, safe='')}?done={done}",
        status_code=HTTPStatus.SEE_OTHER.value,
    )


async def bulk_action(request: Request) -> Response:
    """Redrive or discard exactly the dead letters a preview showed.

    The preview's selection is taken again at the preview's moment (for the minimum age)
    and compared by fingerprint: if a dead letter was added or resolved since, nothing is
    done and the person is asked to preview again.
    """
    backend = backend_of(request)
    form = await _checked_form(request, backend)
    require_ready(backend)  # refuse the whole batch, not each dead letter in turn
    action = form.get("action", "")
    if action not in _ACTIONS:
        raise Refusal(HTTPStatus.BAD_REQUEST, "action must be redrive or discard")
    who, reason, force = _who_why(form)
    query = ListQuery(
        owner=form.get("owner", "") or "",
        source_topic=form.get("source_topic", "") or "",
        error_type=form.get("error_type", "") or "",
        min_age=form.get("min_age", "") or "",
    )
    try:
        chosen = query.chosen()
        as_of = float(form.get("as_of") or "")
    except ValueError as exc:
        raise Refusal(HTTPStatus.BAD_REQUEST, f"the form is damaged: {exc}") from None
    if chosen.is_empty:
        raise Refusal(HTTPStatus.BAD_REQUEST, "refusing to act on every dead letter at once")
    chosen_now = list(itertools.islice(query.scan(backend.index, as_of), BULK_LIMIT))
    ids = [letter.dead_letter_id for letter, _ in chosen_now]
    if not ids or selection_digest(ids) != form.get("digest"):
        raise Refusal(
            HTTPStatus.CONFLICT,
            "the dead letters matching this filter changed since the preview (added or "
            "resolved); nothing was done. Preview again",
        )
    started = time.monotonic()
    outcome: dict[str, list[dict[str, Any]]] = {"done": [], "refused": [], "failed": []}
    for dead_letter_id in ids:
        try:
            resolution = await resolve(backend, dead_letter_id, action, who, reason, force=force)
        except Refusal as refusal:
            kind = "refused" if refusal.status is HTTPStatus.CONFLICT else "failed"
            outcome[kind].append({"id": dead_letter_id, "error": refusal.message})
        except (KafkaError, OSError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc or 'no answer in time'}"
            outcome["failed"].append({"id": dead_letter_id, "error": error})
        else:
            outcome["done"].append({"id": dead_letter_id, "resolution": resolution})
    return render(
        request,
        "bulk_done.html",
        action=action,
        query=query,
        outcome=outcome,
        seconds=time.monotonic() - started,
    )
