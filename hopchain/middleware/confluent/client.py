"""What the confluent-kafka wrappers need of the client: settings, reads, commits, seeks.

confluent-kafka's ``Consumer`` blocks in ``poll``, ``consume`` and a synchronous
``commit``. The wrappers are asyncio code (the engine is), so every blocking call runs on one
thread of the wrapper's own, one call at a time (librdkafka's consumer is used by one thread
at a time); ``seek`` does not block and runs where it is called, between those calls.

confluent-kafka 2.16 ships an asyncio API (``confluent_kafka.aio``). Its consumer is the
same thread hop as here; its producer (``AIOProducer``) refuses records with headers, which
every hopchain record and dead letter has. So the wrappers take the plain ``Consumer`` and
``Producer`` and run the blocking calls themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from hopchain.exceptions import ConfigurationError
from hopchain.schemas.record import ConsumedRecord

__all__ = ["FALSE_WORDS", "BlockingCalls", "consumer_settings", "read_message"]

logger = logging.getLogger("hopchain")

FALSE_WORDS = frozenset({"false", "0", "no", "off"})
"""How librdkafka settings spell a boolean false."""


def consumer_settings(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The consumer's librdkafka settings with auto-commit off, and its group.

    Raises:
        ConfigurationError: no ``group.id``, or ``enable.auto.commit`` turned on.
    """
    settings = dict(config)
    group = settings.get("group.id")
    if not isinstance(group, str) or not group:
        raise ConfigurationError(
            "ConfluentEnvelopeConsumer needs a 'group.id' in its config: offsets are "
            "committed for that group after handling"
        )
    auto = settings.setdefault("enable.auto.commit", False)
    if str(auto).lower() not in FALSE_WORDS:
        raise ConfigurationError(
            f"ConfluentEnvelopeConsumer refuses enable.auto.commit={auto!r}: librdkafka would "
            "commit records before they are handled or parked, and a crash would lose them; "
            "leave it out (hopchain sets it to False) and let the wrapper commit"
        )
    return settings, group


def read_message(message: Message) -> ConsumedRecord:
    """The record a message holds.

    confluent-kafka decodes header names as UTF-8 and fails for the whole list when one is
    not: such a record comes with its value, key and position but no headers, and says why
    in ``unreadable`` (see :meth:`ConsumedRecord.from_confluent`); the wrappers read it again
    (:mod:`~hopchain.middleware.confluent.reread`). The message's half-read headers are
    dropped at once: confluent-kafka would hand them out, and crash, on the next read.
    """
    record = ConsumedRecord.from_confluent(message)
    if record.unreadable is not None:
        message.set_headers([])
    return record


class BlockingCalls:
    """The consumer's blocking calls, on one thread of their own."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="hopchain-confluent")

    async def fetch(self, count: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        """Up to ``count`` records: wait ``timeout`` seconds for one, then take what is there.

        Raises:
            confluent_kafka.KafkaException: a fatal client error.
        """
        loop = asyncio.get_running_loop()
        messages = await loop.run_in_executor(self.thread, self._fetch, count, timeout)
        records = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(message)
            elif error.fatal():
                raise KafkaException(error)
            elif error.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001 - librdkafka's code
                logger.warning("confluent-kafka consumer: %s", error)
        return records

    def _fetch(self, count: int, timeout: float) -> list[Message]:
        first = self.consumer.poll(timeout)
        if first is None:
            return []
        if count == 1:
            return [first]
        return [first, *self.consumer.consume(count - 1, 0)]

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit these next offsets synchronously.

        Raises:
            confluent_kafka.KafkaException: the broker refused the commit (of a partition).
        """
        partitions = [TopicPartition(t, p, offset) for (t, p), offset in offsets.items()]
        loop = asyncio.get_running_loop()
        committed = await loop.run_in_executor(self.thread, self._commit, partitions)
        for partition in committed or ():
            if partition.error is not None:
                raise KafkaException(partition.error)

    def _commit(self, partitions: list[TopicPartition]) -> list[TopicPartition] | None:
        return self.consumer.commit(offsets=partitions, asynchronous=False)

    def seek(self, topic: str, partition: int, offset: int) -> bool:
        """Move the fetch position of a partition; False when it is not assigned here."""
        try:
            self.consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException:
            return False  # its new owner starts from the committed offset
        return True

    async def close(self) -> None:
        """Leave the group and stop the thread."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.thread, self.consumer.close)
        finally:
            self.thread.shutdown(wait=False)
