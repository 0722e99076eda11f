"""Middleware that validates, rejects, appends hops and traces, for FastStream and aiokafka."""

from hopchain.middleware.aiokafka import EnvelopeConsumer, EnvelopeProducer
from hopchain.middleware.context import HopContext, Origin, current_hop, origin
from hopchain.middleware.failures import (
    Conflict,
    ContractViolation,
    EnvironmentFailure,
    ExceptionMapper,
    RejectedInput,
    StageFailure,
    Transient,
    Unauthorized,
    classify_exception,
)
from hopchain.middleware.faststream import HopchainMiddleware
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.middleware.record import ConsumedRecord
from hopchain.middleware.runtime import DeadLetterProducer, HopchainRuntime

__all__ = [
    "Conflict",
    "ConsumedRecord",
    "ContractViolation",
    "DeadLetterProducer",
    "EnvelopeConsumer",
    "EnvelopeProducer",
    "EnvironmentFailure",
    "ExceptionMapper",
    "HopContext",
    "HopchainMiddleware",
    "HopchainRuntime",
    "MiddlewareMetrics",
    "Origin",
    "RejectedInput",
    "StageFailure",
    "Transient",
    "Unauthorized",
    "classify_exception",
    "current_hop",
    "origin",
]
