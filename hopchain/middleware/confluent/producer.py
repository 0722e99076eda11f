"""Sending with a validated envelope through a plain ``confluent_kafka.Producer``.

Every record sent carries a validated envelope with exactly one new hop, extending the
record being handled (``current_hop()``) or starting a chain in an ``origin`` block, and one
``traceparent``; an invalid one is refused and nothing is sent. See
:mod:`hopchain.middleware.confluent` for the reading side and an example.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Message, Producer

from hopchain.middleware.confluent.delivery import Deliveries
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import Hopchain
from hopchain.middleware.engine.outputs import outgoing, wire_headers
from hopchain.send_spans import note_sent

__all__ = ["ConfluentEnvelopeProducer"]


class ConfluentEnvelopeProducer:
    """Sends records with a validated envelope; refuses (and sends nothing) when invalid.

    Args:
        producer: a ``confluent_kafka.Producer`` the caller owns (best with
            ``enable.idempotence=True``); hopchain hands it the encoded bytes.
        hopchain: the component's engine.
        deliveries: the producer's delivery reports, when something serves them already.
    """

    def __init__(
        self, producer: Producer, hopchain: Hopchain, *, deliveries: Deliveries | None = None
    ) -> None:
        self.producer = producer
        self.hopchain = hopchain
        self.deliveries = deliveries if deliveries is not None else Deliveries(producer)

    async def send(
        self,
        topic: str,
        payload: Any,
        *,
        key: bytes | None = None,
        hop: HopContext | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> Message:
        """Validate, envelope and send one record; wait for its delivery report.

        The new hop extends ``hop`` (default: the record being handled in this task, see
        :func:`~hopchain.middleware.current_hop`); with neither, the record is an origin,
        named by the enclosing :func:`~hopchain.middleware.origin` block.

        Args:
            topic: where to send; it must have a contract.
            payload: the topic's payload model, or anything it validates from.
            key: the record key.
            hop: the record this one derives from, when it is not the current one.
            headers: extra headers; the ``hopchain-*`` and trace context headers are
                written by hopchain and may not be set here. Values must be UTF-8.
            partition: an explicit partition.

        Returns:
            The delivered ``confluent_kafka.Message`` (its partition and offset).

        Raises:
            EnvelopeRejected: the payload, the envelope or a header breaks the contract;
                nothing was sent.
            confluent_kafka.KafkaException: the record was not delivered.
        """
        publisher = self.hopchain.publisher
        with outgoing(publisher, topic, payload, hop=hop, headers=headers, key=key) as rec:
            delivered = await self.deliveries.send(
                topic,
                value=rec.value,
                key=key,
                headers=wire_headers(rec, headers),
                partition=partition,
            )
            note_sent(_Where(delivered))
            return delivered

    async def send_soon(
        self,
        topic: str,
        payload: Any,
        *,
        key: bytes | None = None,
        hop: HopContext | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> asyncio.Future[Message]:
        """As :meth:`send`, but return once the record is queued.

        Await the returned future for the record's delivery report.

        Raises:
            EnvelopeRejected: the payload, the envelope or a header breaks the contract;
                nothing was queued.
        """
        with outgoing(self.hopchain.publisher, topic, payload, hop=hop, headers=headers) as record:
            return await self.deliveries.produce(
                topic,
                value=record.value,
                key=key,
                headers=wire_headers(record, headers),
                partition=partition,
            )

    async def close(self) -> None:
        """Wait for the records in flight, and stop serving delivery reports."""
        await self.deliveries.close()


class _Where:
    """A delivered message's partition and offset, as attributes (for the send span)."""

    def __init__(self, message: Message) -> None:
        self.partition = message.partition()
        self.offset = message.offset()
