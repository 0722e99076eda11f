"""What a wrapped producer sends: the record, the caller's headers checked, and hopchain's.

Shared by the producer wrappers of every client (aiokafka's ``EnvelopeProducer``,
confluent-kafka's ``ConfluentEnvelopeProducer``): the record for a payload, what a caller
may add to it, and the list of headers handed to the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from hopchain.exceptions import ReasonCode
from hopchain.middleware.context import HopContext, current_hop
from hopchain.middleware.engine.publish import Publisher
from hopchain.propagation import TRACE_CONTEXT_HEADERS
from hopchain.schemas import EncodedRecord

__all__ = ["CONTENT_TYPE", "caller_headers", "outgoing", "wire_headers"]

CONTENT_TYPE = "content-type"
"""Written as ``application/json`` unless the caller set it: the value is JSON in both wire
modes, as FastStream publishers say."""


def caller_headers(
    publisher: Publisher, topic: str, headers: Sequence[tuple[str, bytes]]
) -> dict[str, str]:
    """The caller's headers as text, refusing what a hopchain reader would reject.

    Names reserved for hopchain are refused by the engine, with the other checks.

    Raises:
        EnvelopeRejected: a trace-context header (hopchain writes it from the hop's span),
            or a value that is not UTF-8.
    """
    text: dict[str, str] = {}
    for name, raw in headers:
        if name.lower() in TRACE_CONTEXT_HEADERS:
            raise publisher.refuse(
                topic,
                ReasonCode.BAD_TRACEPARENT,
                f"header {name!r} is written by hopchain from the hop's span; "
                "a caller may not set it",
                f"$.headers.{name}",
            )
        try:
            text[name] = raw.decode()
        except UnicodeDecodeError as exc:
            raise publisher.refuse(
                topic,
                ReasonCode.NOT_UTF8,
                f"header {name!r} is not UTF-8 (byte {exc.start}); hopchain readers "
                "refuse records with binary header values",
                f"$.headers.{name}",
            ) from None
    return text


def wire_headers(
    record: EncodedRecord, caller: Sequence[tuple[str, bytes]]
) -> list[tuple[str, bytes]]:
    """The caller's headers, then hopchain's, then ``content-type`` unless the caller set it."""
    headers = [*caller, *record.headers]
    if not any(name.lower() == CONTENT_TYPE for name, _ in caller):
        headers.append((CONTENT_TYPE, b"application/json"))
    return headers


def outgoing(
    publisher: Publisher,
    topic: str,
    payload: Any,
    *,
    hop: HopContext | None,
    headers: Sequence[tuple[str, bytes]],
    key: bytes | None = None,
    server_address: str | None = None,
) -> AbstractContextManager[EncodedRecord]:
    """The record a wrapped producer sends for ``payload``; the block sends it.

    Its hop extends ``hop``, by default the record being handled in this task
    (``current_hop()``); with neither, it is an origin. The caller's headers are checked
    first (:func:`caller_headers`).

    Raises:
        EnvelopeRejected: the payload, the envelope or a header breaks the contract.
    """
    incoming = hop if hop is not None else current_hop()
    extra = caller_headers(publisher, topic, headers)
    return publisher.sending(
        topic, payload, incoming=incoming, headers=extra, key=key, server_address=server_address
    )
