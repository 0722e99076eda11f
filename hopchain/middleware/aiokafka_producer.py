"""Sending with a validated envelope through a plain ``AIOKafkaProducer``.

Every record sent carries a validated envelope with exactly one new hop, extending the
record being handled (``current_hop()``) or starting a chain in an ``origin`` block; an
invalid one is refused and nothing is sent. See :mod:`hopchain.middleware.aiokafka` for the
reading side and an example.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from hopchain.middleware.context import HopContext
from hopchain.middleware.engine import Hopchain
from hopchain.middleware.engine.outputs import outgoing, wire_headers
from hopchain.schemas import EncodedRecord
from hopchain.send_spans import note_sent

__all__ = ["EnvelopeProducer"]


class EnvelopeProducer:
    """Sends records with a validated envelope; refuses (and sends nothing) when invalid.

    Args:
        producer: a started ``AIOKafkaProducer`` without a value serializer: hopchain
            hands it the encoded bytes.
        hopchain: the component's engine.
    """

    def __init__(self, producer: AIOKafkaProducer, hopchain: Hopchain) -> None:
        self.producer = producer
        self.hopchain = hopchain

    async def send(
        self,
        topic: str,
        payload: Any,
        *,
        key: bytes | None = None,
        hop: HopContext | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> RecordMetadata:
        """Validate, envelope and send one record; wait for the broker's acknowledgement.

        The new hop extends ``hop`` (default: the record being handled in this task, see
        :func:`~hopchain.middleware.current_hop`); with neither, the record is an origin,
        named by the enclosing :func:`~hopchain.middleware.origin` block.

        Args:
            topic: where to send; it must have a contract.
            payload: the topic's payload model, or anything it validates from
                (a dict, another model, JSON text or bytes).
            key: the record key.
            hop: the record this one derives from, when it is not the current one.
            headers: extra headers; the ``hopchain-*`` and trace context headers are
                written by hopchain and may not be set here. Values must be UTF-8.
            partition: an explicit partition.

        Raises:
            EnvelopeRejected: the payload, the envelope or a header breaks the contract;
                nothing was sent.
        """
        client = getattr(self.producer, "client", None)  # for the span's server.address
        hosts = ",".join(f"{host}:{port}" for host, port, *_ in getattr(client, "hosts", ()))
        publisher = self.hopchain.publisher
        with outgoing(
            publisher, topic, payload, hop=hop, headers=headers, key=key, server_address=hosts
        ) as record:
            metadata = await self._send(topic, record, headers, key=key, partition=partition)
            note_sent(metadata)
            return metadata

    async def send_soon(
        self,
        topic: str,
        payload: Any,
        *,
        key: bytes | None = None,
        hop: HopContext | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """As :meth:`send`, but return once the record is queued.

        Await the returned future for the broker's acknowledgement (a transaction's commit
        waits for it too).

        Raises:
            EnvelopeRejected: the payload, the envelope or a header breaks the contract;
                nothing was queued.
        """
        with outgoing(self.hopchain.publisher, topic, payload, hop=hop, headers=headers) as record:
            future: asyncio.Future[RecordMetadata] = await self.producer.send(
                topic,
                value=record.value,
                key=key,
                partition=partition,
                headers=wire_headers(record, headers),
            )
            return future

    async def _send(
        self,
        topic: str,
        record: EncodedRecord,
        caller_headers: Sequence[tuple[str, bytes]],
        *,
        key: bytes | None,
        partition: int | None,
    ) -> RecordMetadata:
        headers = wire_headers(record, caller_headers)
        metadata: RecordMetadata = await self.producer.send_and_wait(
            topic, value=record.value, key=key, partition=partition, headers=headers
        )
        return metadata
