"""The FastStream adapter's publish side: every output enveloped, extending its record's hop.

:func:`send_one` validates and envelopes one publish (hopchain refuses, and sends nothing,
when it breaks its topic's contract), then hands it on to FastStream. In batched mode it is
not waited for: the record's commit waits for the broker's acknowledgement instead. Dead
letters written through the broker (:class:`BrokerWriter`) pass unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import OutgoingRecord
from hopchain.middleware.faststream.commits import Pending
from hopchain.middleware.faststream.family import KafkaCommand
from hopchain.middleware.faststream.types import MiddlewareOwner
from hopchain.propagation import KeptTraceContext
from hopchain.send_spans import note_sent

__all__ = ["BrokerWriter", "CallNext", "key_bytes", "send_one", "writing_raw"]

CallNext = Callable[[KafkaCommand], Awaitable[Any]]
"""The rest of FastStream's publish chain."""

writing_raw: ContextVar[bool] = ContextVar("hopchain_writing_raw", default=False)
"""Set while :class:`BrokerWriter` publishes a dead letter: it passes through unchanged."""


def key_bytes(key: Any) -> bytes | None:
    """A publish's key as the span records it."""
    if isinstance(key, bytes):
        return key
    return key.encode() if isinstance(key, str) else None


async def send_one(
    owner: MiddlewareOwner,
    call_next: CallNext,
    cmd: KafkaCommand,
    incoming: HopContext | None,
    waiting: Pending | None,
) -> Any:
    """Envelope one publish extending ``incoming``; in batched mode, do not wait for it.

    Raises:
        EnvelopeRejected: the output breaks its topic's contract; nothing was sent.
    """
    with owner.hopchain.sending(
        cmd.destination,
        cmd.body,
        incoming=incoming,
        headers=cmd.headers,
        key=key_bytes(cmd.key),
        server_address=owner.server_address,
    ) as record:
        if waiting is not None:
            # Batched: not waited for here; the commit waits for the acknowledgement.
            cmd.no_confirm = True
        sent = await send_enveloped(call_next, cmd, record.value, record.headers)
        # The partition is known once the broker answered (not yet when batched).
        note_sent(None if isinstance(sent, asyncio.Future) else sent, client_id=owner.client_id)
        if waiting is not None and isinstance(sent, asyncio.Future):
            waiting.wait_for(sent)
        return sent


async def send_enveloped(
    call_next: CallNext,
    cmd: KafkaCommand,
    value: bytes,
    headers: tuple[tuple[str, bytes], ...],
) -> Any:
    """Hand the enveloped value and hopchain's headers on to FastStream."""
    cmd.body = value
    # Kept: a telemetry middleware after this one may not replace hopchain's traceparent.
    cmd.headers = KeptTraceContext(
        {
            **cmd.headers,
            **{name: raw.decode() for name, raw in headers},
            # Headers mode keeps the value a JSON payload that plain consumers can read.
            "content-type": "application/json",
        }
    )
    return await call_next(cmd)


class BrokerWriter:
    """Writes dead letters and reroutes through the broker's own ``publish``.

    For FastStream's ``TestKafkaBroker`` (of either broker family), which replaces the
    broker's producer in memory, so the whole failure path runs in a unit test. Header
    values go as text, as FastStream sends them: a record whose headers are not UTF-8
    cannot be parked this way.
    """

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def write(self, record: OutgoingRecord) -> None:
        """Publish the record (the hopchain middleware lets it pass unchanged)."""
        text = {name: (raw or b"").decode() for name, raw in record.headers}
        token = writing_raw.set(True)
        try:
            await self.broker.publish(
                record.value or b"",
                record.topic,
                key=record.key,
                headers=text,
                timestamp_ms=record.timestamp_ms,
            )
        finally:
            writing_raw.reset(token)
