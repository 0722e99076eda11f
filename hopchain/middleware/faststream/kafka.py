"""The ``faststream.kafka`` broker family (aiokafka): its records, consumers and producer.

FastStream hands a middleware aiokafka's ``ConsumerRecord`` (a tuple of them for a batch
subscriber), and a message's ``consumer`` is the ``AIOKafkaConsumer`` that read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition
from faststream import StreamMessage
from faststream.kafka import KafkaBroker
from faststream.kafka.response import KafkaPublishCommand
from faststream.kafka.security import parse_security

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.faststream.commits import bind_listeners
from hopchain.middleware.faststream.family import UNSAFE_ACKS, decodable
from hopchain.schemas.record import ConsumedRecord

__all__ = ["KAFKA", "KafkaFamily", "require_safe_producer"]

_SAFE_ACKS = ("all", -1)


class _Partitions:
    """Single partitions of an ``AIOKafkaConsumer``."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    @property
    def key(self) -> int:
        return id(self.consumer)

    def pause(self, topic: str, partition: int) -> None:
        self.consumer.pause(TopicPartition(topic, partition))

    def resume(self, topic: str, partition: int) -> None:
        tp = TopicPartition(topic, partition)
        if tp in self.consumer.assignment():
            self.consumer.resume(tp)

    def pause_all(self) -> None:
        self.consumer.pause(*self.consumer.assignment())


class KafkaFamily:
    """FastStream's ``faststream.kafka`` brokers and routers."""

    name = "faststream.kafka (aiokafka)"
    publish_command = KafkaPublishCommand
    settles_with_message = False

    @staticmethod
    def read(raw: Any) -> ConsumedRecord:
        """An ``aiokafka.ConsumerRecord`` as hopchain sees it."""
        return ConsumedRecord.from_aiokafka(raw)

    @staticmethod
    def parseable(raw: Any) -> None:
        """Drop header values FastStream's parser cannot decode (they are parked already)."""
        headers = tuple(raw.headers or ())
        kept = decodable(headers)
        if len(kept) != len(headers):
            raw.headers = kept

    @staticmethod
    def with_payload(raw: Any, value: bytes) -> Any:
        """A copy of the record with ``value``."""
        return dataclasses.replace(raw, value=value)

    @staticmethod
    def headers(raw: Any) -> Sequence[tuple[str, bytes | None]]:
        """The record's headers."""
        return tuple(raw.headers or ())

    @staticmethod
    def offsets(message: StreamMessage[Any] | None) -> Any:
        """The ``AIOKafkaConsumer`` that read ``message`` (its public ``consumer``)."""
        consumer = getattr(message, "consumer", None)
        return consumer if callable(getattr(consumer, "assignment", None)) else None

    @staticmethod
    def partitions(message: StreamMessage[Any] | None) -> _Partitions | None:
        """The consumer that read ``message`` (none under FastStream's in-memory broker)."""
        consumer = getattr(message, "consumer", None)
        return _Partitions(consumer) if callable(getattr(consumer, "assignment", None)) else None

    @staticmethod
    def settled(message: StreamMessage[Any] | None, raw: Any) -> None:
        """Nothing to do: FastStream's ack commits the consumer's position."""

    @staticmethod
    def rereader(broker: Any) -> None:  # noqa: ARG004 - the protocol's
        """None: aiokafka reads every record whole (with hopchain's header-name reader)."""
        return

    @staticmethod
    def prepare(broker: Any, seen: Any, *, started: bool) -> None:
        """Have the broker's producer write with ``acks="all"`` and idempotence.

        The consumers it builds tell their rebalance listener which consumer it is called
        for (:func:`~hopchain.middleware.faststream.commits.bind_listeners`), so that a
        revocation commits for that consumer only. A broker that connected before it was
        checked no longer shows its connection options: its servers and security are then
        taken from its public description (``KafkaBroker(..., security=...)``;
        ``specification_url`` when one is given).
        """
        if isinstance(broker, KafkaBroker):
            config = broker.config.broker_config
            config.builder = bind_listeners(config.builder)
            hooked = getattr(config.connect, "hopchain_checked", False)
            require_safe_producer(broker, seen)
            if started and not hooked:
                described = broker.specification
                seen(
                    {
                        "bootstrap_servers": ",".join(described.url),
                        **parse_security(described.security),
                    }
                )


KAFKA = KafkaFamily()
"""The family of ``faststream.kafka`` brokers (the default before a broker is checked)."""


def require_safe_producer(
    broker: KafkaBroker, seen: Callable[[Mapping[str, Any]], None] | None = None
) -> None:
    """Have the broker's producer write with ``acks="all"`` and idempotence.

    Left unset, both are set when the broker connects; an explicit ``acks=0`` or ``acks=1``
    is refused there with one line: an output acknowledged by the leader alone is lost
    with it, and its offset would already be committed. ``seen`` is given the connection
    options (bootstrap servers and client id label the send spans). The consumer builder
    the connection makes binds listeners, as the one it replaces did.
    """
    config = broker.config.broker_config
    connect = config.connect
    if getattr(connect, "hopchain_checked", False):
        return

    async def checked(**options: Any) -> None:
        acks = options.get("acks")
        if acks in UNSAFE_ACKS:
            raise ConfigurationError(
                f"KafkaBroker(acks={acks!r}): hopchain commits a record once its output is "
                "acknowledged, which must mean on every in-sync replica; use "
                'KafkaBroker(..., acks="all", enable_idempotence=True) or leave both unset'
            )
        if acks not in _SAFE_ACKS:
            options["acks"] = "all"
        options["enable_idempotence"] = True
        if seen is not None:
            seen(options)
        await connect(**options)
        # Connecting builds the subscribers' consumer builder anew, from these options.
        config.builder = bind_listeners(config.builder)

    checked.hopchain_checked = True  # type: ignore[attr-defined]
    # FastStream exposes the producer's settings nowhere else: they arrive here when the
    # broker connects, before the producer is built.
    config.connect = checked  # type: ignore[method-assign]
