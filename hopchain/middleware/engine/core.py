"""The engine of one component: :class:`Hopchain`, shared by every client adapter.

It knows no Kafka client. An adapter (the FastStream middleware, the aiokafka wrapper)
hands it the records it reads as :class:`~hopchain.schemas.record.ConsumedRecord` and a
:class:`~hopchain.middleware.engine.writer.RecordWriter` to park with; the engine validates,
builds hops, decides exits and writes dead letters. Each step is a small object that
receives only the collaborators it needs (:class:`~hopchain.middleware.engine.parts.EngineParts`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from hopchain.config import HopchainConfig
from hopchain.exceptions import UNEXPECTED, ConfigurationError, DeadLetterWriteError, DecodeError
from hopchain.loading import LoadError, load_registry
from hopchain.middleware.context import HopContext
from hopchain.middleware.dedupe import DedupeStore, MemoryDedupeStore
from hopchain.middleware.engine.abort import AbortState
from hopchain.middleware.engine.consume import Receiver, internal_error
from hopchain.middleware.engine.parts import EngineParts, ExceptionCapture
from hopchain.middleware.engine.publish import Publisher
from hopchain.middleware.engine.retry import DefaultRetry
from hopchain.middleware.engine.settle import Settled, Settler
from hopchain.middleware.engine.verdict import Received
from hopchain.middleware.engine.writer import DeadLetterWriter, RecordWriter
from hopchain.middleware.failures import ExceptionMapper
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.middleware.policy import Backoff, TransportRetry
from hopchain.schemas import (
    Attempt,
    ContractRegistry,
    Decision,
    Decoded,
    EncodedRecord,
    Envelope,
    EnvelopeCodec,
    ErrorType,
    Failure,
    Keyring,
    Limits,
)
from hopchain.schemas.deadletter import DeadLetterInfo
from hopchain.schemas.record import ConsumedRecord
from hopchain.tracing import HopSpan

__all__ = ["Hopchain"]

logger = logging.getLogger("hopchain")


def _default_instance() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Hopchain:
    """Validation, rejection, hop building and failure exits for one component.

    Args:
        registry: the contracts of every topic the component reads or writes; when None,
            they are loaded from ``config.contracts`` (``HOPCHAIN_CONTRACTS``).
        component: the component's logical name, written into every hop it appends.
        config: settings; by default read from the ``HOPCHAIN_*`` environment variables.
        instance: which running copy (defaults to ``host:pid``).
        keyring: HMAC keys; by default those of ``config.hmac_keys`` (``HOPCHAIN_HMAC_KEYS``).
            The component signs its hops when it holds its own key, and refuses unsigned or
            forged hops of every component whose key it holds.
        limits: hop and size limits.
        metrics_registry: the Prometheus registry to put metrics on (a new one if None).
        dedupe: where ``HopContext.once`` remembers committed effects (in memory if None;
            use a durable store for side-effecting stages).
        codec: the envelope codec to use instead of the default one for ``registry``, keys
            and limits (for example one that still writes schema 1, during an upgrade).
        redact: scrubs a captured exception's text before it goes into a dead letter (with
            ``HOPCHAIN_CAPTURE_EXCEPTIONS``); a callback that raises withholds the text.

    What it does is done by three steps, whose methods it offers as its own (each a method
    here that hands over to the step):
    :class:`Receiver` (``receive`` and ``receive_batch``, the receive decision, with
    ``accept``, ``handling``, ``open``, ``reject``, ``reporting``, ``would_reject``),
    :class:`Publisher` (``coerce_payload``, ``append``, ``outgoing``, ``sending``) and
    :class:`Settler` (``failure_of``, ``settle``, ``dead_letter``, ``abort``, ``handled``).

    Raises:
        ConfigurationError: no contracts were given or configured, or a setting is invalid.
    """

    def __init__(
        self,
        registry: ContractRegistry | None = None,
        *,
        component: str,
        config: HopchainConfig | None = None,
        instance: str | None = None,
        keyring: Keyring | None = None,
        limits: Limits | None = None,
        metrics_registry: CollectorRegistry | None = None,
        dedupe: DedupeStore | None = None,
        redact: Callable[[str], str] | None = None,
        codec: EnvelopeCodec | None = None,
    ) -> None:
        self.config = config if config is not None else HopchainConfig()
        if registry is None:
            if self.config.contracts is None:
                raise ConfigurationError(
                    "no topic contracts: pass Hopchain(registry, ...) or set HOPCHAIN_CONTRACTS "
                    "to MODULE:ATTRIBUTE of a ContractRegistry"
                )
            try:
                registry = load_registry(self.config.contracts)
            except LoadError as exc:
                # Name the setting: the module was not named in the code the user reads.
                raise LoadError(exc.spec, f"HOPCHAIN_CONTRACTS={exc.spec}: {exc}") from exc
        if self.config.schema_registry_url is not None:
            # A URL given only in code reaches the registry formats (and prepare()) too.
            for contract in registry:
                if contract.payload_format is not None:
                    contract.payload_format.use_registry(self.config.schema_registry_url)
        keys = keyring if keyring is not None else self.config.keyring()
        metrics = MiddlewareMetrics(metrics_registry)
        self.parts = EngineParts(
            registry=registry,
            component=component,
            instance=instance or _default_instance(),
            keyring=keys,
            codec=codec
            if codec is not None
            else EnvelopeCodec(registry, keyring=keys, limits=limits),
            metrics=metrics,
            dedupe=dedupe if dedupe is not None else MemoryDedupeStore(),
            dead_letters=DeadLetterWriter(
                metrics,
                component=component,
                attempts=self.config.dead_letter_attempts,
                backoff_seconds=self.config.dead_letter_backoff_seconds,
            ),
            aborted=AbortState(),
            report_only=self.config.report_only,
            capture=ExceptionCapture(self.config.exception_limit_bytes, redact)
            if self.config.capture_exceptions
            else None,
        )
        self.receiver = Receiver(self.parts)
        self.publisher = Publisher(self.parts)
        self.settler = Settler(self.parts, self.publisher)
        self.default_retry = DefaultRetry(
            TransportRetry(
                retries=self.config.transport_retries,
                backoff=Backoff(initial=self.config.transport_backoff_seconds),
            ),
        )

    # -- what the component is ---------------------------------------------------------------

    @property
    def registry(self) -> ContractRegistry:
        """The topic contracts."""
        return self.parts.registry

    @property
    def component(self) -> str:
        """The component's logical name."""
        return self.parts.component

    @property
    def instance(self) -> str:
        """Which running copy of the component this is."""
        return self.parts.instance

    @property
    def keyring(self) -> Keyring | None:
        """The HMAC keys in use, if any."""
        return self.parts.keyring

    @property
    def codec(self) -> EnvelopeCodec:
        """The envelope codec for the component's contracts and keys."""
        return self.parts.codec

    @property
    def metrics(self) -> MiddlewareMetrics:
        """The component's Prometheus metrics."""
        return self.parts.metrics

    @property
    def dedupe(self) -> DedupeStore:
        """Where committed effects are remembered."""
        return self.parts.dedupe

    @property
    def aborted(self) -> AbortState:
        """Set when a stage aborted: wait on it and exit non-zero (see :class:`AbortState`)."""
        return self.parts.aborted

    # -- receiving (Receiver) ----------------------------------------------------------------

    def receive(
        self,
        record: ConsumedRecord,
        *,
        group: str,
        scope: ExitStack | None = None,
        body: bool = False,
    ) -> Received:
        """The receive decision: handle, park, report or skip (see :meth:`Receiver.receive`)."""
        return self.receiver.receive(record, group=group, scope=scope, body=body)

    def receive_batch(
        self,
        records: Sequence[ConsumedRecord],
        *,
        group: str,
        scope: ExitStack | None = None,
        body: bool = False,
    ) -> Iterator[Received]:
        """The receive decision on each record of a fetch (see :meth:`Receiver.receive_batch`).

        The verdicts come in order, each decided when asked for; the codec reads each topic's
        records of the fetch in one call.
        """
        return self.receiver.receive_batch(records, group=group, scope=scope, body=body)

    def pass_on(self, received: Received, *, group: str, scope: ExitStack) -> Received:
        """Report-only: a refused record as a hop (see :meth:`Receiver.pass_on`)."""
        return self.receiver.pass_on(received, group=group, scope=scope)

    def accept(self, record: ConsumedRecord) -> Decoded:
        """Validate a record against its topic's contract (see :meth:`Receiver.accept`)."""
        return self.receiver.accept(record)

    def reporting(self, topic: str) -> bool:
        """Whether ``topic``'s refused records are only reported."""
        return self.receiver.reporting(topic)

    def would_reject(self, record: ConsumedRecord, error: DecodeError) -> None:
        """Count, log and trace what enforcing would park, without parking it."""
        self.receiver.would_reject(record, error)

    def handling(
        self, record: ConsumedRecord, decoded: Decoded, *, group: str
    ) -> AbstractContextManager[tuple[HopContext, HopSpan]]:
        """Handle a valid record: its hop's span and ``current_hop()`` for the block."""
        return self.receiver.handling(record, decoded, group=group)

    def open(
        self,
        record: ConsumedRecord,
        decoded: Decoded,
        *,
        group: str,
        span_id: str,
        received_at: datetime | None = None,
    ) -> HopContext:
        """The handling context of a valid record (``received_at``: now, by default)."""
        return self.receiver.open(
            record, decoded, group=group, span_id=span_id, received_at=received_at
        )

    async def reject(
        self,
        record: ConsumedRecord,
        error: DecodeError,
        *,
        group: str,
        writer: RecordWriter,
        cause: BaseException | None = None,
    ) -> DeadLetterInfo:
        """Park a refused record byte for byte (see :meth:`Receiver.reject`)."""
        return await self.receiver.reject(record, error, group=group, writer=writer, cause=cause)

    def park(
        self, received: Received, *, group: str, writer: RecordWriter
    ) -> Coroutine[Any, Any, DeadLetterInfo]:
        """Park a record whose verdict is ``PARK``, as :meth:`receive` decided.

        The refusal is logged now; the dead letter is written when the result is awaited
        (see :meth:`Receiver.reject`).

        Raises:
            DeadLetterWriteError: when awaited: it could not be parked; do not commit its
                offset.
        """
        assert received.error is not None  # noqa: S101 - every PARK verdict carries one
        return self.receiver.reject(
            received.record, received.error, group=group, writer=writer, cause=received.cause
        )

    # -- publishing (Publisher) --------------------------------------------------------------

    def coerce_payload(self, topic: str, body: Any) -> BaseModel:
        """Turn what the caller publishes into the topic's payload model."""
        return self.publisher.coerce_payload(topic, body)

    def append(
        self,
        hop: HopContext,
        *,
        decision: Decision | None,
        destination: str | None,
        failure: Failure | None = None,
        observation: str = "",
        attempts: Iterable[Attempt] | None = None,
        contract: tuple[str, int] | None = None,
    ) -> Envelope:
        """The received envelope with this component's hop appended."""
        return self.publisher.append(
            hop,
            decision=decision,
            destination=destination,
            failure=failure,
            observation=observation,
            attempts=attempts,
            contract=contract,
        )

    def outgoing(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        trace_id: str,
        span_id: str,
        headers: Mapping[str, str] | None = None,
        decision: Decision | None = None,
        observation: str = "",
    ) -> tuple[EncodedRecord, Envelope]:
        """Validate and envelope a record for ``topic``: exactly one new hop."""
        return self.publisher.outgoing(
            topic,
            body,
            incoming=incoming,
            trace_id=trace_id,
            span_id=span_id,
            headers=headers,
            decision=decision,
            observation=observation,
        )

    def sending(
        self,
        topic: str,
        body: Any,
        *,
        incoming: HopContext | None,
        headers: Mapping[str, str] | None = None,
        key: bytes | None = None,
        server_address: str | None = None,
    ) -> AbstractContextManager[EncodedRecord]:
        """The record to send for ``body``; the block sends it (see :meth:`Publisher.sending`)."""
        return self.publisher.sending(
            topic,
            body,
            incoming=incoming,
            headers=headers,
            key=key,
            server_address=server_address,
        )

    # -- settling (Settler) ------------------------------------------------------------------

    def failure_of(
        self,
        exc: BaseException,
        hop: HopContext,
        *,
        mappers: tuple[ExceptionMapper, ...] = (),
        error_type: ErrorType | None = None,
    ) -> Failure:
        """The failure a hop reports for ``exc``."""
        return self.settler.failure_of(exc, hop, mappers=mappers, error_type=error_type)

    async def settle(
        self,
        hop: HopContext,
        exc: BaseException,
        *,
        writer: RecordWriter,
        mappers: tuple[ExceptionMapper, ...] = (),
        error_type: ErrorType | None = None,
    ) -> Settled:
        """Take the exit for a failed record (see :meth:`Settler.settle`).

        Should settling itself raise (an exception mapper, the stage's policy, hopchain's
        own code), the record is parked as it was received, as ``reader_error``: never
        acknowledged unsettled.

        Raises:
            DeadLetterWriteError: the record could not be parked; do not commit it.
        """
        try:
            return await self.settler.settle(
                hop, exc, writer=writer, mappers=mappers, error_type=error_type
            )
        except DeadLetterWriteError:
            raise
        except UNEXPECTED as failed:  # a failed record must still be parked
            error = internal_error(hop.record, failed, step="settle")
            info = await self.receiver.reject(
                hop.record, error, group=hop.group, writer=writer, cause=failed
            )
            return Settled(failure=info.failure, dead_letter=info)

    async def dead_letter(
        self,
        hop: HopContext,
        failure: Failure,
        *,
        writer: RecordWriter,
        observation: str = "",
        dead_letter_topic: str | None = None,
        owner: str | None = None,
        exception: str | None = None,
    ) -> DeadLetterInfo:
        """Park a valid record whose handling failed, with a ``dead_lettered`` hop."""
        return await self.settler.dead_letter(
            hop,
            failure,
            writer=writer,
            observation=observation,
            dead_letter_topic=dead_letter_topic,
            owner=owner,
            exception=exception,
        )

    def abort(self, hop: HopContext, failure: Failure, *, run: bool = True) -> None:
        """Record that a stage stopped on this record; the caller stops consuming."""
        self.settler.abort(hop, failure, run=run)

    def handled(self, hop: HopContext) -> None:
        """Account for a record handled (its decision counted, a sink's marker logged).

        The record was handled: a failure to count it is logged, never raised.
        """
        try:
            self.settler.handled(hop)
        except UNEXPECTED:
            logger.exception("accounting for handled %s failed", hop.record.describe())

    def consumed(self, topic: str, seconds: float, count: int = 1) -> None:
        """Count ``count`` records of ``topic`` handled, each in ``seconds``.

        ``hopchain_consumed_total`` and ``hopchain_processing_seconds``, for every adapter;
        the label children are resolved once.
        """
        metrics = self.metrics
        metrics.child(metrics.consumed, topic, self.component).inc(count)
        timing = metrics.child(metrics.processing, topic, self.component)
        for _ in range(count):
            timing.observe(seconds)

    def check_topics(self, topics: Iterable[str]) -> None:
        """Refuse to start when a topic has no contract (names the topic and the fix)."""
        self.registry.require(topics)
