"""The ``faststream.confluent`` broker family (confluent-kafka): records, consumers, producer.

FastStream hands a middleware a ``confluent_kafka.Message`` (a tuple of them for a batch
subscriber), whose accessors are methods; a message's ``consumer`` is FastStream's wrapper,
whose public ``consumer`` is the ``confluent_kafka.Consumer`` that read it.

Commits per record (``AckPolicy.ACK``). FastStream's ack on this broker commits the offsets
the consumer *stored*, and librdkafka stores a record's offset as soon as it hands the record
over: one record's ack would commit past another that could not be parked, or that a nack
rewound. So :meth:`ConfluentFamily.prepare` turns the storing off
(``enable.auto.offset.store=false``), and hopchain stores a record's offset once it is
settled, handled or parked and acknowledged (:meth:`ConfluentFamily.settled`): the ack
commits only those. Batched commits (``AckPolicy.MANUAL``) are the ledger's, as on the
aiokafka broker, through :class:`_Offsets`; with ``on_revoke=middleware.listener()`` on a
subscriber, what is settled is committed before its partitions move (without it, records
settled since the last commit are read again by a partition's next owner: duplicates, not
losses). Dead letters are written by the middleware's own
:class:`~hopchain.middleware.producer.KafkaWriter` (an aiokafka producer), as on the aiokafka
broker.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import ssl
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from aiokafka import TopicPartition as Partition
from aiokafka.errors import IllegalStateError
from confluent_kafka import KafkaException, Message, TopicPartition
from faststream import StreamMessage
from faststream.confluent import KafkaBroker
from faststream.confluent.response import KafkaPublishCommand

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.confluent.client import read_message
from hopchain.middleware.confluent.reread import Rereader, aiokafka_connection
from hopchain.middleware.faststream.family import UNSAFE_ACKS, UNUSABLE_LOGIN, decodable
from hopchain.schemas.deadletter import undecodable_name_bytes
from hopchain.schemas.record import ConsumedRecord, confluent_headers

__all__ = ["CONFLUENT", "ConfluentFamily"]

logger = logging.getLogger("hopchain")

_STORE = "enable.auto.offset.store"


class _Partitions:
    """Single partitions of a ``confluent_kafka.Consumer``."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    @property
    def key(self) -> int:
        return id(self.consumer)

    def pause(self, topic: str, partition: int) -> None:
        self.consumer.pause([TopicPartition(topic, partition)])

    def resume(self, topic: str, partition: int) -> None:
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        if (topic, partition) in assigned:
            self.consumer.resume([TopicPartition(topic, partition)])

    def pause_all(self) -> None:
        self.consumer.pause(self.consumer.assignment())


class _Offsets:
    """A ``confluent_kafka.Consumer`` as the batched commits' ledger drives it.

    The ledger speaks aiokafka's ``TopicPartition``; a partition this consumer does not own
    raises aiokafka's ``IllegalStateError``, as there. A commit waits for the broker, in a
    thread of its own (FastStream's consumer thread is busy polling).
    """

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    def assignment(self) -> set[Partition]:
        return {Partition(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def seek(self, partition: Partition, offset: int) -> None:
        with _owned():
            self.consumer.seek(TopicPartition(partition.topic, partition.partition, offset))

    def pause(self, *partitions: Partition) -> None:
        with _owned():
            self.consumer.pause([TopicPartition(tp.topic, tp.partition) for tp in partitions])

    def resume(self, *partitions: Partition) -> None:
        with _owned():
            self.consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in partitions])

    async def commit(self, offsets: dict[Partition, int] | None = None) -> None:
        chosen = [TopicPartition(tp.topic, tp.partition, at) for tp, at in (offsets or {}).items()]
        await asyncio.to_thread(self.consumer.commit, offsets=chosen, asynchronous=False)


@contextmanager
def _owned() -> Iterator[None]:
    try:
        yield
    except KafkaException as exc:
        raise IllegalStateError(str(exc)) from exc


def _consumer(message: StreamMessage[Any] | None) -> Any:
    """The ``confluent_kafka.Consumer`` that read ``message`` (None: the in-memory broker's).

    A message's ``consumer`` is FastStream's wrapper; the wrapper's, confluent-kafka's.
    """
    consumer = getattr(getattr(message, "consumer", None), "consumer", None)
    return consumer if callable(getattr(consumer, "store_offsets", None)) else None


class ConfluentFamily:
    """FastStream's ``faststream.confluent`` brokers and routers."""

    name = "faststream.confluent (confluent-kafka)"
    publish_command = KafkaPublishCommand
    settles_with_message = True

    @staticmethod
    def read(raw: Any) -> ConsumedRecord:
        """A ``confluent_kafka.Message`` as hopchain sees it (as the plain wrappers read it)."""
        return read_message(raw)

    @staticmethod
    def parseable(raw: Any) -> None:
        """Drop header values FastStream's parser cannot decode (the record is parked already).

        Headers confluent-kafka could not read at all were dropped by :meth:`read`.
        """
        headers = confluent_headers(raw)[0]
        kept = decodable(headers)
        if len(kept) != len(headers):
            raw.set_headers(kept)

    @staticmethod
    def with_payload(raw: Any, value: bytes) -> Any:
        """The record with ``value`` (a ``Message`` is changed in place; it was read)."""
        raw.set_value(value)
        return raw

    @staticmethod
    def headers(raw: Any) -> Sequence[tuple[str, bytes | None]]:
        """The record's headers."""
        return confluent_headers(raw)[0]

    def __init__(self) -> None:
        self._offsets: dict[int, _Offsets] = {}

    def offsets(self, message: StreamMessage[Any] | None) -> _Offsets | None:
        """The consumer that read ``message``, for the ledger (one object per consumer)."""
        consumer = _consumer(message)
        if consumer is None:
            return None
        known = self._offsets.get(id(consumer))
        if known is None or known.consumer is not consumer:
            known = self._offsets[id(consumer)] = _Offsets(consumer)
        return known

    @staticmethod
    def partitions(message: StreamMessage[Any] | None) -> _Partitions | None:
        """The consumer that read ``message``."""
        consumer = _consumer(message)
        return _Partitions(consumer) if consumer is not None else None

    @staticmethod
    def settled(message: StreamMessage[Any] | None, raw: Any) -> None:
        """Store the offset after ``raw`` (the latest of each partition of a batch).

        FastStream's ack then commits it. A partition no longer assigned is left to its
        next owner, which reads the record again from the last commit.
        """
        consumer = _consumer(message)
        if consumer is None:
            return
        after: dict[tuple[str, int], int] = {}
        for record in raw if isinstance(raw, tuple) else (raw,):
            if isinstance(record, Message):
                place = (str(record.topic()), int(record.partition() or 0))
                after[place] = max(after.get(place, 0), int(record.offset() or 0) + 1)
        offsets = [TopicPartition(topic, part, offset) for (topic, part), offset in after.items()]
        try:
            consumer.store_offsets(offsets=offsets)
        except KafkaException as exc:
            logger.warning(
                "offsets %s not stored (%s); the partition's next owner reads them again",
                ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in offsets),
                exc,
            )

    @staticmethod
    def rereader(broker: Any) -> ConfluentRereading | None:
        """Reads a record confluent-kafka read without its headers again, with aiokafka.

        From the broker's own consumer settings (a router has none: its broker's are used
        when that is checked).
        """
        if not isinstance(broker, KafkaBroker):
            return None
        return ConfluentRereading(broker.config.broker_config.connection_config.consumer_config)

    @staticmethod
    def prepare(broker: Any, seen: Any, *, started: bool) -> None:
        """Refuse concurrent subscribers; store offsets only when settled; ``acks=all``.

        Raises:
            ConfigurationError: a subscriber with ``max_workers`` above 1 (records of a
                partition would settle out of order), ``acks`` 0 or 1, or a broker started
                before the check with offsets stored on delivery.
        """
        for subscriber in broker.subscribers:
            if (getattr(subscriber, "max_workers", None) or 1) > 1:
                topics = [topic.name for topic in getattr(subscriber, "topics", ())]
                raise ConfigurationError(
                    f"subscriber of {topics} uses max_workers={subscriber.max_workers}: on a "
                    "faststream.confluent broker hopchain needs each partition's records "
                    "settled in order; leave max_workers at 1"
                )
        if not isinstance(broker, KafkaBroker):
            return  # a router: its broker is checked when it is
        _store_when_settled(broker.config.broker_config, started=started)
        connection = broker.config.broker_config.connection_config
        settings = connection.config
        producer = connection.producer_config
        acks = producer.get("acks")
        if acks in UNSAFE_ACKS:
            raise ConfigurationError(
                f"KafkaBroker(acks={acks!r}): hopchain commits a record once its output is "
                "acknowledged, which must mean on every in-sync replica; leave acks unset "
                '(FastStream then uses "all")'
            )
        if "enable.idempotence" not in settings and not started:
            connection.raw_producer_config["enable_idempotence"] = True
        seen(_aiokafka_options(producer))


def _aiokafka_options(producer: Mapping[str, Any]) -> dict[str, Any]:
    """The producer's librdkafka settings as an aiokafka client's (dead letters use aiokafka)."""
    options: dict[str, Any] = {
        "bootstrap_servers": producer.get("bootstrap.servers"),
        "client_id": producer.get("client.id"),
    }
    try:
        login = aiokafka_connection(producer)
    except (ConfigurationError, OSError, ssl.SSLError) as exc:
        options[UNUSABLE_LOGIN] = str(exc)
    else:
        login.pop("client_id", None)
        options.update(login)
    return options


class ConfluentRereading:
    """A :class:`~hopchain.middleware.confluent.reread.Rereader` for FastStream's messages."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.rereader = Rereader(config)

    async def whole(self, record: ConsumedRecord, raw: Any) -> ConsumedRecord:
        """``record`` read whole; ``raw`` (a ``Message``) gets the headers it can carry."""
        whole = await self.rereader.whole(record)
        if whole is not record:
            # A handler of a report-only topic sees what confluent-kafka can hold: every
            # header but the ones whose names are not UTF-8.
            held = [pair for pair in whole.headers if undecodable_name_bytes(pair[0]) is None]
            raw.set_headers(held)
        return whole

    async def close(self) -> None:
        """Stop the aiokafka consumer, if one was started."""
        await self.rereader.close()


def _store_when_settled(config: Any, *, started: bool) -> None:
    """Have the consumers FastStream builds for ``config`` store no offset by themselves.

    Set on the consumers' settings only (FastStream builds each subscriber's consumer with
    ``config.builder``): librdkafka would warn about a consumer setting on the producer.
    """
    builder = config.builder
    consumers = getattr(builder, "config", config.connection_config)
    if str(consumers.config.get(_STORE, True)).lower() == "false":
        return
    if started:
        raise ConfigurationError(
            "this faststream.confluent broker started before hopchain checked it, and its "
            "consumers store every offset on delivery: build the app with "
            "middleware.app(broker), call middleware.check(broker) before it starts, or pass "
            'config={"enable.auto.offset.store": False}'
        )
    if consumers is config.connection_config and hasattr(builder, "config"):
        consumers = builder.config = copy.copy(consumers)
    consumers.config = {**consumers.config, _STORE: False}


CONFLUENT = ConfluentFamily()
"""The family of ``faststream.confluent`` brokers."""
