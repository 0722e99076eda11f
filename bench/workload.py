"""The records every benchmark sends: 1 KiB of JSON that carries its own send time."""

from __future__ import annotations

import os
import random
import string
import time
from enum import StrEnum

from pydantic import BaseModel

from hopchain.config import HopchainConfig
from hopchain.schemas import ContractRegistry, TopicContract, WireMode

PAYLOAD_BYTES = 1024
"""Size of one record's payload as JSON, exactly (the value in headers mode and plain runs)."""

_FILLER = "".join(random.Random(1024).choices(string.ascii_letters + string.digits, k=2048))


class Variant(StrEnum):
    """What the 3-hop pipeline runs on."""

    PLAIN = "plain"
    """FastStream with its JSON codec and no middleware, ``AckPolicy.ACK``."""
    ACK_FIRST = "ackfirst"
    """The same with ``AckPolicy.ACK_FIRST`` (FastStream's default: commits before handling)."""
    HEADERS = "headers"
    """FastStream with hopchain, envelope in Kafka headers, per-record commits."""
    BODY = "body"
    """FastStream with hopchain, envelope in the record value around the payload."""
    BATCHED = "batched"
    """FastStream with hopchain, headers mode, batched commits (``HOPCHAIN_COMMITS=batched``)."""
    TXN = "txn"
    """hopchain's transactional stages on aiokafka (``TransactionalConsumer``), headers mode."""
    AIOKAFKA = "aiokafka"
    """Plain aiokafka, batched: the ceiling."""
    LEAN = "lean"
    """``aiokafka`` with an envelope on every record, headers mode, the way hopchain writes it,
    read and extended by the lean reference reader (``bench/lean_reader.py``): the ceiling of
    ``batches``, the same wire work done the plainest fast way."""
    BATCHES = "batches"
    """hopchain's batch path on aiokafka (``EnvelopeConsumer.batches``), headers mode."""
    TXN_BATCHES = "txnbatches"
    """hopchain's transactional batches (``TransactionalConsumer.batches``), headers mode."""
    C_FLOOR = "cfloor"
    """Plain confluent-kafka, batched (``consume``, one commit per batch): that family's floor."""
    C_BATCHES = "cbatches"
    """hopchain's batch path on confluent-kafka (``ConfluentEnvelopeConsumer.batches``)."""
    C_ACK_FIRST = "cackfirst"
    """FastStream's confluent broker, JSON, no middleware, its default ``AckPolicy.ACK_FIRST``."""
    C_HEADERS = "cheaders"
    """FastStream's confluent broker with hopchain, headers mode, as the README runs it."""

    @property
    def hopchain_mode(self) -> WireMode | None:
        """The wire mode when the variant runs hopchain."""
        if self is Variant.BODY:
            return WireMode.BODY
        hopchain = (
            Variant.HEADERS,
            Variant.BATCHED,
            Variant.TXN,
            Variant.BATCHES,
            Variant.TXN_BATCHES,
            Variant.C_BATCHES,
            Variant.C_HEADERS,
        )
        return WireMode.HEADERS if self in hopchain else None

    @property
    def confluent(self) -> bool:
        """Whether the variant runs on confluent-kafka (librdkafka), not aiokafka."""
        return self in {Variant.C_FLOOR, Variant.C_BATCHES, Variant.C_ACK_FIRST, Variant.C_HEADERS}

    @property
    def commits(self) -> str | None:
        """``HOPCHAIN_COMMITS`` for the variant's FastStream processes, when it runs hopchain."""
        if self in {Variant.BATCHED, Variant.C_HEADERS}:
            return "batched"  # what the README's first snippet gets, on either broker
        return "record" if self.hopchain_mode is not None else None


class Item(BaseModel):
    """The payload: a sequence number, the producer's clock at send time, and filler."""

    seq: int
    sent_ns: int
    blob: str


def make_item(seq: int, sent_ns: int | None = None) -> Item:
    """An item whose JSON is exactly :data:`PAYLOAD_BYTES` long."""
    stamp = time.time_ns() if sent_ns is None else sent_ns
    overhead = len(f'{{"seq":{seq},"sent_ns":{stamp},"blob":""}}')
    return Item(seq=seq, sent_ns=stamp, blob=_FILLER[: PAYLOAD_BYTES - overhead])


def batched_commits_available() -> bool:
    """Whether this hopchain has batched commits (the ``HOPCHAIN_COMMITS`` setting)."""
    return "commits" in HopchainConfig.model_fields


def registry_for(topics: list[str], mode: WireMode) -> ContractRegistry:
    """Every topic of the pipeline carries :class:`Item` in ``mode``."""
    return ContractRegistry(
        TopicContract(topic=topic, model=Item, owner="bench", mode=mode) for topic in topics
    )


def cpu_seconds() -> float:
    """User plus system CPU time of this process so far."""
    times = os.times()
    return times.user + times.system
