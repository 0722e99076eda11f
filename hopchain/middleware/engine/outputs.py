"""The headers of a record a wrapped producer sends: the caller's, checked, and hopchain's.

Shared by the producer wrappers of every client (aiokafka's ``EnvelopeProducer``,
confluent-kafka's ``ConfluentEnvelopeProducer``): what a caller may add to a record, and
the list of headers handed to the client.
"""

from __future__ import annotations

from collections.abc import Sequence

from hopchain.exceptions import ReasonCode
from hopchain.middleware.engine.publish import Publisher
from hopchain.propagation import TRACE_CONTEXT_HEADERS
from hopchain.schemas import EncodedRecord

__all__ = ["CONTENT_TYPE", "caller_headers", "wire_headers"]

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
