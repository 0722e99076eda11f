"""Middleware that validates, rejects, appends hops and traces, for FastStream and aiokafka.

The engine (:mod:`hopchain.middleware.engine`) knows no Kafka client; the FastStream
middleware (:mod:`hopchain.middleware.faststream`), the aiokafka wrapper
(:mod:`hopchain.middleware.aiokafka`) and the confluent-kafka wrapper
(:mod:`hopchain.middleware.confluent`, ``hopchain[confluent]``) are thin adapters over it.
Most users import everything from :mod:`hopchain` itself.

Names are imported when first used, so that importing the engine (or this package) loads no
Kafka client: a service on one client never imports the other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hopchain.middleware.aiokafka import EnvelopeConsumer, EnvelopeProducer
    from hopchain.middleware.confluent import (
        ConfluentEnvelopeConsumer,
        ConfluentEnvelopeProducer,
        ConfluentWriter,
    )
    from hopchain.middleware.context import (
        HopContext,
        Origin,
        RetryFeedback,
        current_hop,
        origin,
    )
    from hopchain.middleware.engine import (
        AbortState,
        Hopchain,
        OutgoingRecord,
        RecordWriter,
        Settled,
    )
    from hopchain.middleware.faststream import BrokerWriter, HopchainMiddleware
    from hopchain.middleware.producer import KafkaWriter, ProducerWriter

_WHERE = {
    "AbortState": "hopchain.middleware.engine",
    "BrokerWriter": "hopchain.middleware.faststream",
    "ConfluentEnvelopeConsumer": "hopchain.middleware.confluent",
    "ConfluentEnvelopeProducer": "hopchain.middleware.confluent",
    "ConfluentWriter": "hopchain.middleware.confluent",
    "EnvelopeConsumer": "hopchain.middleware.aiokafka",
    "EnvelopeProducer": "hopchain.middleware.aiokafka",
    "HopContext": "hopchain.middleware.context",
    "Hopchain": "hopchain.middleware.engine",
    "HopchainMiddleware": "hopchain.middleware.faststream",
    "KafkaWriter": "hopchain.middleware.producer",
    "Origin": "hopchain.middleware.context",
    "OutgoingRecord": "hopchain.middleware.engine",
    "ProducerWriter": "hopchain.middleware.producer",
    "RecordWriter": "hopchain.middleware.engine",
    "RetryFeedback": "hopchain.middleware.context",
    "Settled": "hopchain.middleware.engine",
    "current_hop": "hopchain.middleware.context",
    "origin": "hopchain.middleware.context",
}

__all__ = [
    "AbortState",
    "BrokerWriter",
    "ConfluentEnvelopeConsumer",
    "ConfluentEnvelopeProducer",
    "ConfluentWriter",
    "EnvelopeConsumer",
    "EnvelopeProducer",
    "HopContext",
    "Hopchain",
    "HopchainMiddleware",
    "KafkaWriter",
    "Origin",
    "OutgoingRecord",
    "ProducerWriter",
    "RecordWriter",
    "RetryFeedback",
    "Settled",
    "current_hop",
    "origin",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
