"""What the FastStream adapter needs of a broker family, as Protocols.

FastStream ships two Kafka brokers: ``faststream.kafka`` (aiokafka) and
``faststream.confluent`` (confluent-kafka). They hand a middleware different raw records and
consumers; everything else, the engine's receive decision included, is the same. The
factory picks one :class:`BrokerFamily` per broker when it checks it
(:mod:`~hopchain.middleware.faststream.kafka` or
:mod:`~hopchain.middleware.faststream.confluent`), and the per-record code asks it, never
the record, which client read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, Union

from faststream import StreamMessage

from hopchain.middleware.faststream.ledger import OffsetConsumer
from hopchain.schemas.record import ConsumedRecord

if TYPE_CHECKING:
    from faststream.confluent.response import KafkaPublishCommand as ConfluentPublishCommand
    from faststream.kafka.response import KafkaPublishCommand as AiokafkaPublishCommand

__all__ = [
    "UNSAFE_ACKS",
    "UNUSABLE_LOGIN",
    "BrokerFamily",
    "KafkaCommand",
    "PartitionControl",
    "Rereading",
    "decodable",
    "header_texts",
]

KafkaCommand: TypeAlias = Union["AiokafkaPublishCommand", "ConfluentPublishCommand"]
"""A publish of either family (the two ``KafkaPublishCommand`` classes have the same shape)."""

UNSAFE_ACKS = (0, 1, "0", "1")
"""Producer ``acks`` hopchain refuses: an output the leader alone acknowledged is lost with it,
and the offset of the record that made it would already be committed."""


UNUSABLE_LOGIN = "hopchain_unusable_login"
"""The key, among the connection options a family hands ``seen``, of why aiokafka (which
writes the dead letters) cannot log in as the broker's clients do."""


class PartitionControl(Protocol):
    """Pausing and resuming single partitions of the consumer that read a message."""

    @property
    def key(self) -> int:
        """Tells consumers apart (the consumer's ``id``)."""
        ...

    def pause(self, topic: str, partition: int) -> None:
        """Stop fetching ``topic``/``partition`` until :meth:`resume`."""
        ...

    def resume(self, topic: str, partition: int) -> None:
        """Fetch ``topic``/``partition`` again, if the consumer still owns it."""
        ...

    def pause_all(self) -> None:
        """Stop fetching every assigned partition (the stage aborted)."""
        ...


class Rereading(Protocol):
    """Reads again the records a family's client read only in part."""

    async def whole(self, record: ConsumedRecord, raw: Any) -> ConsumedRecord:
        """``record`` read whole, ``raw`` given the headers it lacked; as it was if it cannot be."""
        ...

    async def close(self) -> None:
        """Release what reading again holds (a client)."""
        ...


class BrokerFamily(Protocol):
    """One FastStream Kafka broker family: how its records, consumers and producer are read."""

    name: str
    """The broker's module and client, for messages (``faststream.kafka (aiokafka)``)."""
    publish_command: Any
    """The family's ``KafkaPublishCommand`` class (a batch's outputs are split into them)."""
    settles_with_message: bool
    """Whether :meth:`settled` needs FastStream's message (the consumer it names): then a
    record parked on receipt is acknowledged once FastStream parsed it, not before."""

    def read(self, raw: Any) -> ConsumedRecord:
        """The record as hopchain sees it."""
        ...

    def parseable(self, raw: Any) -> None:
        """Drop what FastStream's parser cannot decode, once the record was parked."""
        ...

    def with_payload(self, raw: Any, value: bytes) -> Any:
        """The record of a batch as its handler receives it: ``value`` as its value."""
        ...

    def headers(self, raw: Any) -> Sequence[tuple[str, bytes | None]]:
        """The record's headers (after :meth:`parseable`)."""
        ...

    def offsets(self, message: StreamMessage[Any] | None) -> OffsetConsumer | None:
        """The consumer that read ``message``, as the batched commits' ledger drives it.

        The same object for every message of one consumer; None when there is none to commit
        with (FastStream's in-memory broker).
        """
        ...

    def partitions(self, message: StreamMessage[Any] | None) -> PartitionControl | None:
        """The partitions of the consumer that read ``message`` (None: nothing to pause)."""
        ...

    def settled(self, message: StreamMessage[Any] | None, raw: Any) -> None:
        """``raw`` (a record or a batch's tuple) may now be committed by FastStream's ack.

        ``message``: FastStream's message of it (it names the consumer that read it).
        """
        ...

    def rereader(self, broker: Any) -> Rereading | None:
        """What reads again the records of ``broker`` its client reads only in part (None: none)."""
        ...

    def prepare(self, broker: Any, seen: Any, *, started: bool) -> None:
        """Check and set the broker's client settings hopchain relies on.

        ``seen`` is given the producer's connection options as aiokafka keyword arguments
        (``bootstrap_servers``, ``client_id`` and the login; or :data:`UNUSABLE_LOGIN`), now
        or when the broker connects; ``started``: the broker's clients are already built
        (only checks are possible).

        Raises:
            ConfigurationError: a setting that could lose records, in one line.
        """
        ...


def decodable(headers: Iterable[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """The headers whose values FastStream's parser can decode (UTF-8 text, or none)."""
    kept = []
    for name, raw in headers:
        try:
            (raw or b"").decode()
        except UnicodeDecodeError:
            continue
        kept.append((name, raw))
    return kept


def header_texts(family: BrokerFamily, raws: Iterable[Any]) -> list[dict[str, str]]:
    """Each record's headers as FastStream's batch parser gives them to a handler."""
    return [{name: (value or b"").decode() for name, value in family.headers(raw)} for raw in raws]
