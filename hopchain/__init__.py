"""hopchain: the failure path of Kafka services as a typed, validated, append-only contract.

What a service writes is importable from here::

    from hopchain import ContractRegistry, Hopchain, HopchainMiddleware, TopicContract

That is the contracts, the middleware and the plain-client wrappers, the configuration, the
stage and failure-policy vocabulary, what a handler raises or reads about its record, and
the errors a service catches. Plumbing lives in named submodules: the engine's records and
writers in :mod:`hopchain.middleware.engine`, the envelope's structs in
:mod:`hopchain.schemas`, the whole exception tree in :mod:`hopchain.exceptions`, logging in
:mod:`hopchain.logs`. The dead-letter service is :mod:`hopchain.consumers`; test helpers are
:mod:`hopchain.testing`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from hopchain.__about__ import __version__ as __version__
from hopchain.excepthook import install as _install_excepthook
from hopchain.logs import configure_logging as _configure_logging

# A ConfigurationError that ends the program is one line (see hopchain.excepthook); first,
# so that an invalid HOPCHAIN_LOG_* value read next is one line too.
_install_excepthook()
# Log lines with a time, a level and a logger name, unless the application writes them.
_configure_logging(explicit=False)

_EXPORTS: dict[str, str] = {
    # contracts
    "ContractRegistry": "hopchain.schemas",
    "Keyring": "hopchain.schemas",
    "Limits": "hopchain.schemas",
    "TopicContract": "hopchain.schemas",
    "WireMode": "hopchain.schemas",
    # the middleware and the plain-client wrappers
    "ConfluentEnvelopeConsumer": "hopchain.middleware.confluent",
    "ConfluentEnvelopeProducer": "hopchain.middleware.confluent",
    "EnvelopeConsumer": "hopchain.middleware.aiokafka",
    "EnvelopeProducer": "hopchain.middleware.aiokafka",
    "Hopchain": "hopchain.middleware.engine",
    "HopchainMiddleware": "hopchain.middleware.faststream",
    "TransactionalConsumer": "hopchain.middleware.transactional",
    # configuration
    "HopchainConfig": "hopchain.config",
    "faststream_security": "hopchain.security",
    "login_errors": "hopchain.security",
    # stages and their failure policy
    "Abort": "hopchain.middleware.policy",
    "Backoff": "hopchain.middleware.policy",
    "DeadLetter": "hopchain.middleware.policy",
    "Degrade": "hopchain.middleware.policy",
    "EffectKind": "hopchain.schemas",
    "ErrorType": "hopchain.schemas",
    "Pipeline": "hopchain.middleware.stage",
    "Reroute": "hopchain.middleware.policy",
    "Stage": "hopchain.middleware.stage",
    "TransportRetry": "hopchain.middleware.policy",
    # failures a handler raises
    "Conflict": "hopchain.middleware.failures",
    "ContractViolation": "hopchain.middleware.failures",
    "EnvironmentFailure": "hopchain.middleware.failures",
    "RejectedInput": "hopchain.middleware.failures",
    "StageFailure": "hopchain.middleware.failures",
    "Transient": "hopchain.middleware.failures",
    "Unauthorized": "hopchain.middleware.failures",
    # handling a record
    "HopContext": "hopchain.middleware.context",
    "MemoryDedupeStore": "hopchain.middleware.dedupe",
    "PostgresDedupeStore": "hopchain.middleware.dedupe_postgres",
    "SqliteDedupeStore": "hopchain.middleware.dedupe",
    "current_hop": "hopchain.middleware.context",
    "origin": "hopchain.middleware.context",
    # errors a service catches (the whole tree is hopchain.exceptions)
    "ConfigurationError": "hopchain.exceptions",
    "DeadLetterWriteError": "hopchain.exceptions",
    "EnvelopeRejected": "hopchain.exceptions",
    "HopchainError": "hopchain.exceptions",
    "KafkaLoginError": "hopchain.exceptions",
    "ReasonCode": "hopchain.exceptions",
}
"""Where each public name lives, grouped by kind as httpx and aiokafka group theirs; imported
on first use, so that ``import hopchain.consumers`` or ``hopchain --version`` does not load
the FastStream and aiokafka adapters. ``__all__`` is this table's keys; a test holds the
imports below and docs/reference/api.md to it."""

_MOVED: dict[str, str] = {
    "AbortState": "hopchain.middleware.engine",
    "BrokerWriter": "hopchain.middleware.faststream",
    "ConfluentWriter": "hopchain.middleware.confluent",
    "ConsumedRecord": "hopchain.schemas",
    "Decision": "hopchain.schemas",
    "DecodeError": "hopchain.exceptions",
    "DedupeStore": "hopchain.middleware.dedupe",
    "EffectTransaction": "hopchain.middleware.dedupe_postgres",
    "Envelope": "hopchain.schemas",
    "EnvelopeError": "hopchain.exceptions",
    "ExceptionMapper": "hopchain.middleware.failures",
    "Failure": "hopchain.schemas",
    "Hop": "hopchain.schemas",
    "JsonFormatter": "hopchain.logs",
    "KafkaWriter": "hopchain.middleware.producer",
    "LogSettings": "hopchain.logs",
    "OutgoingRecord": "hopchain.middleware.engine",
    "ProducerWriter": "hopchain.middleware.producer",
    "RecordWriter": "hopchain.middleware.engine",
    "RetryFeedback": "hopchain.middleware.context",
    "Settled": "hopchain.middleware.engine",
    "UnknownTopicError": "hopchain.exceptions",
    "classify_exception": "hopchain.middleware.failures",
    "configure_logging": "hopchain.logs",
    "tune_collector": "hopchain.collector",
}
"""Names ``hopchain`` exported in 0.2 and no longer does, with their homes: they still work
from here, with a DeprecationWarning, until 0.4.0."""

__all__ = list(_EXPORTS)

if TYPE_CHECKING:
    # The table again, for type checkers, which cannot follow __getattr__; a test holds the
    # two together. The redundant aliases mark each name as re-exported.
    from hopchain.config import (  # noqa: I001 - one statement per module, aliases kept together
        HopchainConfig as HopchainConfig,
    )
    from hopchain.exceptions import (
        ConfigurationError as ConfigurationError,
        DeadLetterWriteError as DeadLetterWriteError,
        EnvelopeRejected as EnvelopeRejected,
        HopchainError as HopchainError,
        KafkaLoginError as KafkaLoginError,
        ReasonCode as ReasonCode,
    )
    from hopchain.middleware.aiokafka import (
        EnvelopeConsumer as EnvelopeConsumer,
        EnvelopeProducer as EnvelopeProducer,
    )
    from hopchain.middleware.confluent import (
        ConfluentEnvelopeConsumer as ConfluentEnvelopeConsumer,
        ConfluentEnvelopeProducer as ConfluentEnvelopeProducer,
    )
    from hopchain.middleware.context import (
        HopContext as HopContext,
        current_hop as current_hop,
        origin as origin,
    )
    from hopchain.middleware.dedupe import (
        MemoryDedupeStore as MemoryDedupeStore,
        SqliteDedupeStore as SqliteDedupeStore,
    )
    from hopchain.middleware.dedupe_postgres import (
        PostgresDedupeStore as PostgresDedupeStore,
    )
    from hopchain.middleware.engine import (
        Hopchain as Hopchain,
    )
    from hopchain.middleware.failures import (
        Conflict as Conflict,
        ContractViolation as ContractViolation,
        EnvironmentFailure as EnvironmentFailure,
        RejectedInput as RejectedInput,
        StageFailure as StageFailure,
        Transient as Transient,
        Unauthorized as Unauthorized,
    )
    from hopchain.middleware.faststream import (
        HopchainMiddleware as HopchainMiddleware,
    )
    from hopchain.middleware.policy import (
        Abort as Abort,
        Backoff as Backoff,
        DeadLetter as DeadLetter,
        Degrade as Degrade,
        Reroute as Reroute,
        TransportRetry as TransportRetry,
    )
    from hopchain.middleware.stage import (
        Pipeline as Pipeline,
        Stage as Stage,
    )
    from hopchain.middleware.transactional import (
        TransactionalConsumer as TransactionalConsumer,
    )
    from hopchain.schemas import (
        ContractRegistry as ContractRegistry,
        EffectKind as EffectKind,
        ErrorType as ErrorType,
        Keyring as Keyring,
        Limits as Limits,
        TopicContract as TopicContract,
        WireMode as WireMode,
    )
    from hopchain.security import (
        faststream_security as faststream_security,
        login_errors as login_errors,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    home = _MOVED.get(name)
    if home is not None:
        # Not cached, so that every importing module is told.
        warnings.warn(
            f"hopchain.{name} is deprecated: import it from {home} "
            f"(hopchain stops exporting it in 0.4.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
    raise AttributeError(f"module 'hopchain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
