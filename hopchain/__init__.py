"""hopchain: the failure path of Kafka services as a typed, validated, append-only contract.

Everything a service needs is importable from here::

    from hopchain import ContractRegistry, Hopchain, HopchainMiddleware, TopicContract

The dead-letter service is :mod:`hopchain.consumers`; test helpers are
:mod:`hopchain.testing`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hopchain.__about__ import __version__
from hopchain.excepthook import install as _install_excepthook
from hopchain.logs import configure_logging as _configure_logging

# A ConfigurationError that ends the program is one line (see hopchain.excepthook); first,
# so that an invalid HOPCHAIN_LOG_* value read next is one line too.
_install_excepthook()
# Log lines with a time, a level and a logger name, unless the application writes them.
_configure_logging(explicit=False)

if TYPE_CHECKING:
    from hopchain.collector import tune_collector
    from hopchain.config import HopchainConfig
    from hopchain.exceptions import (
        ConfigurationError,
        DeadLetterWriteError,
        DecodeError,
        EnvelopeError,
        EnvelopeRejected,
        HopchainError,
        KafkaLoginError,
        ReasonCode,
        UnknownTopicError,
    )
    from hopchain.logs import JsonFormatter, LogSettings, configure_logging
    from hopchain.middleware.aiokafka import EnvelopeConsumer, EnvelopeProducer
    from hopchain.middleware.confluent import (
        ConfluentEnvelopeConsumer,
        ConfluentEnvelopeProducer,
        ConfluentWriter,
    )
    from hopchain.middleware.context import HopContext, RetryFeedback, current_hop, origin
    from hopchain.middleware.dedupe import DedupeStore, MemoryDedupeStore, SqliteDedupeStore
    from hopchain.middleware.dedupe_postgres import EffectTransaction, PostgresDedupeStore
    from hopchain.middleware.engine import (
        AbortState,
        Hopchain,
        OutgoingRecord,
        RecordWriter,
        Settled,
    )
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
    from hopchain.middleware.faststream import BrokerWriter, HopchainMiddleware
    from hopchain.middleware.policy import (
        Abort,
        Backoff,
        DeadLetter,
        Degrade,
        Reroute,
        TransportRetry,
    )
    from hopchain.middleware.producer import KafkaWriter, ProducerWriter
    from hopchain.middleware.stage import Pipeline, Stage
    from hopchain.middleware.transactional import TransactionalConsumer
    from hopchain.schemas import (
        ConsumedRecord,
        ContractRegistry,
        Decision,
        EffectKind,
        Envelope,
        ErrorType,
        Failure,
        Hop,
        Keyring,
        Limits,
        TopicContract,
        WireMode,
    )
    from hopchain.security import faststream_security, login_errors

_EXPORTS: dict[str, str] = {
    "Abort": "hopchain.middleware.policy",
    "AbortState": "hopchain.middleware.engine",
    "Backoff": "hopchain.middleware.policy",
    "BrokerWriter": "hopchain.middleware.faststream",
    "ConfigurationError": "hopchain.exceptions",
    "ConfluentEnvelopeConsumer": "hopchain.middleware.confluent",
    "ConfluentEnvelopeProducer": "hopchain.middleware.confluent",
    "ConfluentWriter": "hopchain.middleware.confluent",
    "Conflict": "hopchain.middleware.failures",
    "ConsumedRecord": "hopchain.schemas",
    "ContractRegistry": "hopchain.schemas",
    "ContractViolation": "hopchain.middleware.failures",
    "DeadLetter": "hopchain.middleware.policy",
    "DeadLetterWriteError": "hopchain.exceptions",
    "Decision": "hopchain.schemas",
    "DecodeError": "hopchain.exceptions",
    "DedupeStore": "hopchain.middleware.dedupe",
    "Degrade": "hopchain.middleware.policy",
    "EffectKind": "hopchain.schemas",
    "EffectTransaction": "hopchain.middleware.dedupe_postgres",
    "Envelope": "hopchain.schemas",
    "EnvelopeConsumer": "hopchain.middleware.aiokafka",
    "EnvelopeError": "hopchain.exceptions",
    "EnvelopeProducer": "hopchain.middleware.aiokafka",
    "EnvelopeRejected": "hopchain.exceptions",
    "EnvironmentFailure": "hopchain.middleware.failures",
    "ErrorType": "hopchain.schemas",
    "ExceptionMapper": "hopchain.middleware.failures",
    "Failure": "hopchain.schemas",
    "Hop": "hopchain.schemas",
    "HopContext": "hopchain.middleware.context",
    "Hopchain": "hopchain.middleware.engine",
    "JsonFormatter": "hopchain.logs",
    "HopchainConfig": "hopchain.config",
    "HopchainError": "hopchain.exceptions",
    "HopchainMiddleware": "hopchain.middleware.faststream",
    "KafkaLoginError": "hopchain.exceptions",
    "KafkaWriter": "hopchain.middleware.producer",
    "Keyring": "hopchain.schemas",
    "Limits": "hopchain.schemas",
    "LogSettings": "hopchain.logs",
    "MemoryDedupeStore": "hopchain.middleware.dedupe",
    "OutgoingRecord": "hopchain.middleware.engine",
    "Pipeline": "hopchain.middleware.stage",
    "PostgresDedupeStore": "hopchain.middleware.dedupe_postgres",
    "ProducerWriter": "hopchain.middleware.producer",
    "ReasonCode": "hopchain.exceptions",
    "RecordWriter": "hopchain.middleware.engine",
    "RejectedInput": "hopchain.middleware.failures",
    "Reroute": "hopchain.middleware.policy",
    "RetryFeedback": "hopchain.middleware.context",
    "Settled": "hopchain.middleware.engine",
    "SqliteDedupeStore": "hopchain.middleware.dedupe",
    "Stage": "hopchain.middleware.stage",
    "StageFailure": "hopchain.middleware.failures",
    "TopicContract": "hopchain.schemas",
    "TransactionalConsumer": "hopchain.middleware.transactional",
    "Transient": "hopchain.middleware.failures",
    "TransportRetry": "hopchain.middleware.policy",
    "Unauthorized": "hopchain.middleware.failures",
    "classify_exception": "hopchain.middleware.failures",
    "configure_logging": "hopchain.logs",
    "tune_collector": "hopchain.collector",
    "UnknownTopicError": "hopchain.exceptions",
    "WireMode": "hopchain.schemas",
    "current_hop": "hopchain.middleware.context",
    "faststream_security": "hopchain.security",
    "login_errors": "hopchain.security",
    "origin": "hopchain.middleware.context",
}
"""Where each public name lives; imported on first use, so that ``import hopchain.consumers``
or ``hopchain --version`` does not load the FastStream and aiokafka adapters."""

__all__ = [  # noqa: RUF022 - grouped by kind, as httpx and aiokafka do
    # engine and adapters
    "BrokerWriter",
    "ConfluentEnvelopeConsumer",
    "ConfluentEnvelopeProducer",
    "ConfluentWriter",
    "EnvelopeConsumer",
    "EnvelopeProducer",
    "Hopchain",
    "HopchainMiddleware",
    "KafkaWriter",
    "OutgoingRecord",
    "ProducerWriter",
    "RecordWriter",
    "TransactionalConsumer",
    # configuration
    "HopchainConfig",
    "JsonFormatter",
    "LogSettings",
    "configure_logging",
    "faststream_security",
    "login_errors",
    "tune_collector",
    # contracts
    "ContractRegistry",
    "Keyring",
    "Limits",
    "TopicContract",
    "WireMode",
    # stages and their failure policy
    "Abort",
    "Backoff",
    "Conflict",
    "ContractViolation",
    "DeadLetter",
    "Degrade",
    "EnvironmentFailure",
    "ExceptionMapper",
    "Pipeline",
    "RejectedInput",
    "Reroute",
    "Stage",
    "StageFailure",
    "Transient",
    "TransportRetry",
    "Unauthorized",
    "classify_exception",
    # handling a record
    "AbortState",
    "DedupeStore",
    "EffectTransaction",
    "HopContext",
    "MemoryDedupeStore",
    "PostgresDedupeStore",
    "RetryFeedback",
    "Settled",
    "SqliteDedupeStore",
    "current_hop",
    "origin",
    # structs and vocabulary
    "ConsumedRecord",
    "Decision",
    "EffectKind",
    "Envelope",
    "ErrorType",
    "Failure",
    "Hop",
    # errors
    "ConfigurationError",
    "DeadLetterWriteError",
    "DecodeError",
    "EnvelopeError",
    "EnvelopeRejected",
    "HopchainError",
    "KafkaLoginError",
    "ReasonCode",
    "UnknownTopicError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hopchain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
