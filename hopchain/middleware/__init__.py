"""Middleware that validates, rejects, appends hops and traces, for FastStream and aiokafka.

The engine (:mod:`hopchain.middleware.engine`) knows no Kafka client; the FastStream
middleware (:mod:`hopchain.middleware.faststream`) and the aiokafka wrapper
(:mod:`hopchain.middleware.aiokafka`) are thin adapters over it. Most users import
everything from :mod:`hopchain` itself.
"""

from hopchain.middleware.aiokafka import EnvelopeConsumer, EnvelopeProducer
from hopchain.middleware.context import HopContext, Origin, RetryFeedback, current_hop, origin
from hopchain.middleware.engine import AbortState, Hopchain, OutgoingRecord, RecordWriter, Settled
from hopchain.middleware.faststream import BrokerWriter, HopchainMiddleware
from hopchain.middleware.producer import KafkaWriter, ProducerWriter

__all__ = [
    "AbortState",
    "BrokerWriter",
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
