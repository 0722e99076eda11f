"""The engine shared by the FastStream middleware and the plain aiokafka wrapper.

It validates what is read, parks what fails, and builds what is sent: one new hop per
publish, appended to the chain that was received, never a rewrite of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ValidationError

from hopchain.exceptions import (
    ConfigurationError,
    DeadLetterWriteError,
    DecodeError,
    EnvelopeRejected,
    ReasonCode,
)
from hopchain.middleware.context import HopContext, current_origin
from hopchain.middleware.dedupe import DedupeStore, MemoryDedupeStore
from hopchain.middleware.failures import ExceptionMapper, failure_from_exception
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.middleware.policy import Abort, DeadLetter, Reroute, default_exit
from hopchain.middleware.record import ConsumedRecord
from hopchain.middleware.stage import StageExit
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
    ValidationIssue,
    append_hop,
    new_envelope,
    new_envelope_id,
)
from hopchain.schemas.deadletter import DeadLetterInfo, dead_letter_headers

__all__ = ["DeadLetterProducer", "HopchainRuntime", "Settled"]

logger = logging.getLogger("hopchain")

_RESERVED_HEADER_PREFIX = "hopchain-"


@dataclass(frozen=True)
class Settled:
    """How a failed record was settled: parked, rerouted, or the stage aborted."""

    failure: Failure
    dead_letter: DeadLetterInfo | None = None
    rerouted_to: str | None = None
    aborted: bool = False


class DeadLetterProducer(Protocol):
    """The part of ``aiokafka.AIOKafkaProducer`` used to park records."""

    async def send_and_wait(  # noqa: PLR0917 - aiokafka's own signature
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> Any:
        """Send one record and wait for the broker's acknowledgement."""


def _default_instance() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class HopchainRuntime:
    """Validation, rejection and hop building for one component.

    Args:
        registry: the contracts of every topic the component reads or writes.
        component: the component's logical name, written into every hop it appends.
        instance: which running copy (defaults to ``host:pid``).
        keyring: HMAC keys; the component signs its hops when it holds its own key.
        limits: hop and size limits.
        metrics_registry: the Prometheus registry to put metrics on (a new one if None).
        dead_letter_attempts: writes tried before a record is left unparked and the
            consumer stops; the offset is never committed past an unparked record.
        dead_letter_backoff: seconds before the first retry of a dead-letter write,
            doubled each time.
        dedupe: where ``HopContext.once`` remembers committed effects (in memory if None;
            use a durable store for side-effecting stages).
    """

    def __init__(
        self,
        registry: ContractRegistry,
        *,
        component: str,
        instance: str | None = None,
        keyring: Keyring | None = None,
        limits: Limits | None = None,
        metrics_registry: CollectorRegistry | None = None,
        dead_letter_attempts: int = 3,
        dead_letter_backoff: float = 0.2,
        dedupe: DedupeStore | None = None,
    ) -> None:
        if dead_letter_attempts < 1:
            raise ConfigurationError(
                f"dead_letter_attempts must be at least 1 (got {dead_letter_attempts}): "
                "a record that cannot be parked is never skipped"
            )
        self.registry = registry
        self.component = component
        self.instance = instance or _default_instance()
        self.keyring = keyring
        self.codec = EnvelopeCodec(registry, keyring=keyring, limits=limits)
        self.metrics = MiddlewareMetrics(metrics_registry)
        self.dead_letter_attempts = dead_letter_attempts
        self.dead_letter_backoff = dead_letter_backoff
        self.dedupe: DedupeStore = dedupe if dedupe is not None else MemoryDedupeStore()
        self.aborted = asyncio.Event()
        """Set when a stage aborted: a run can wait on it and exit non-zero."""
        self.abort_reason: str | None = None
        self.abort_scope: str | None = None
        """``run`` or ``stage``: what the declared exit stops (see :meth:`abort`)."""

    # -- consuming ---------------------------------------------------------------------------

    def check_topics(self, topics: Iterable[str]) -> None:
        """Refuse to start when a topic has no contract (names the topic and the fix)."""
        self.registry.require(topics)

    def check_broker(self, broker: Any) -> None:
        """Check a FastStream broker before it starts: call it after declaring subscribers.

        Every subscribed topic needs a contract, and every subscriber must commit after
        processing (not ``ACK_FIRST`` or ``MANUAL``), or a crash could lose a record.

        Raises:
            ConfigurationError: naming the subscriber or topic and the fix.
        """
        from hopchain.middleware.faststream import check_subscriber  # noqa: PLC0415

        for subscriber in broker.subscribers:
            check_subscriber(subscriber, self.registry)

    def accept(self, record: ConsumedRecord) -> Decoded:
        """Validate a consumed record.

        Raises:
            DecodeError: the record breaks its topic's contract; its location is filled in.
        """
        try:
            return self.codec.decode(record.topic, record.value, record.headers)
        except DecodeError as exc:
            exc.topic, exc.partition, exc.offset = record.topic, record.partition, record.offset
            raise

    async def reject(
        self,
        record: ConsumedRecord,
        error: DecodeError,
        *,
        group: str,
        producer: DeadLetterProducer,
    ) -> DeadLetterInfo:
        """Park a record that failed validation, byte for byte, with the reason.

        Raises:
            DeadLetterWriteError: it could not be parked; do not commit its offset.
        """
        contract = self.registry.get(record.topic)
        issue = ValidationIssue(code=error.code, message=error.detail[:1000], path=error.path)
        failure = Failure(
            component=self.component,
            error_type=ErrorType.MALFORMED,
            description=f"refused at the consumer boundary: {error.code.value} at {error.path}",
            locally_resolvable=False,
            validation_errors=(issue,),
        )
        info = self._info(record, failure, group=group, owner=contract.owner, error=error)
        self.metrics.rejected.labels(record.topic, "consume", error.code.value).inc()
        logger.error(
            "rejected %s: %s at %s; parking in %s",
            record.describe(),
            error.code.value,
            error.path,
            contract.dead_letter_topic,
            extra={
                "hopchain_event": "rejected",
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "reason": error.code.value,
                "path": error.path,
                "component": self.component,
                "dead_letter_topic": contract.dead_letter_topic,
                "dead_letter_id": info.dead_letter_id,
            },
        )
        await self._park(record, info, contract.dead_letter_topic, producer)
        return info

    async def dead_letter(
        self,
        hop: HopContext,
        failure: Failure,
        *,
        producer: DeadLetterProducer,
        observation: str = "",
        dead_letter_topic: str | None = None,
        owner: str | None = None,
    ) -> DeadLetterInfo:
        """Park a valid record whose handling failed, with a hop saying so.

        The original record is parked unchanged; the envelope with the appended
        ``dead_lettered`` hop travels in the ``hopchain-dlq-envelope`` header.
        """
        contract = self.registry.get(hop.record.topic)
        topic = dead_letter_topic or contract.dead_letter_topic
        owner = owner or contract.owner
        envelope = self.append(
            hop,
            decision=Decision.DEAD_LETTERED,
            destination=topic,
            failure=failure,
            observation=observation or f"parked for {owner}: {failure.error_type.value}",
        )
        info = self._info(hop.record, failure, group=hop.group, owner=owner, envelope=envelope)
        logger.error(
            "dead-lettered %s: %s after %d attempt(s); parking in %s",
            hop.record.describe(),
            failure.error_type.value,
            len(failure.attempts),
            topic,
            extra={
                "hopchain_event": "dead_lettered",
                "topic": hop.record.topic,
                "partition": hop.record.partition,
                "offset": hop.record.offset,
                "error_type": failure.error_type.value,
                "component": self.component,
                "envelope_id": hop.envelope.id,
                "dead_letter_topic": topic,
                "dead_letter_id": info.dead_letter_id,
            },
        )
        await self._park(hop.record, info, topic, producer)
        return info

    async def reroute(
        self, hop: HopContext, topic: str, failure: Failure, *, producer: DeadLetterProducer
    ) -> None:
        """Send the input payload to an alternate topic, with a ``rerouted`` hop.

        Raises:
            DeadLetterWriteError: the alternate topic did not acknowledge the write.
        """
        hop.failure = failure
        record, _ = self.outgoing(
            topic,
            hop.payload,
            incoming=hop,
            trace_id=hop.trace_id,
            span_id=hop.span_id,
            decision=Decision.REROUTED,
        )
        try:
            await producer.send_and_wait(
                topic, value=record.value, key=hop.record.key, headers=list(record.headers)
            )
        except Exception as exc:
            raise DeadLetterWriteError(
                source_topic=hop.record.topic,
                partition=hop.record.partition,
                offset=hop.record.offset,
                dead_letter_topic=topic,
            ) from exc

    def handled(self, hop: HopContext) -> None:
        """Account for a record handled without sending anything on (a sink).

        Its decision is still counted, so the degradation and retry rates of sinks are
        measured too; a degradation at a sink has no record to carry its marker, so it is
        logged.
        """
        if hop.hops_appended:
            return
        decided = hop.effective_decision
        self.metrics.stage_decisions.labels(hop.stage or self.component, decided.value).inc()
        if hop.degradation is not None:
            logger.warning(
                "%s degraded %s at a sink: %s",
                hop.degradation.stage,
                hop.record.describe(),
                hop.degradation.error_type.value,
                extra={
                    "hopchain_event": "degraded_at_sink",
                    "topic": hop.record.topic,
                    "stage": hop.degradation.stage,
                    "error_type": hop.degradation.error_type.value,
                },
            )

    def failure_of(
        self,
        exc: BaseException,
        hop: HopContext,
        *,
        mappers: tuple[ExceptionMapper, ...] = (),
        error_type: ErrorType | None = None,
    ) -> Failure:
        """The failure a hop reports for ``exc``, built from what hopchain observed.

        An output hopchain refused to send (``EnvelopeRejected``) is the stage breaking
        its contract: ``contract_violation``, with the refusal as its validation error.
        """
        if isinstance(exc, EnvelopeRejected) and error_type is None:
            issue = ValidationIssue(code=exc.code, message=exc.detail[:1000], path=exc.path)
            failure = failure_from_exception(exc, hop, error_type=ErrorType.CONTRACT_VIOLATION)
            return failure.model_copy(
                update={
                    "description": f"output refused before publishing to {exc.topic}: "
                    f"{exc.code.value} at {exc.path}",
                    "validation_errors": (issue,),
                }
            )
        return failure_from_exception(exc, hop, mappers=mappers, error_type=error_type)

    async def settle_failure(
        self,
        hop: HopContext,
        exc: BaseException,
        *,
        producer: DeadLetterProducer,
        mappers: tuple[ExceptionMapper, ...] = (),
        error_type: ErrorType | None = None,
    ) -> Settled:
        """Take the exit for a failed record: the stage's declared one, else the default.

        A declared stage raises :class:`StageExit` with its exit; any other exception gets
        the default exit of its type (``unauthorized`` and ``environment`` abort, the rest
        is dead-lettered). On abort nothing is written: the caller must stop consuming
        without committing.

        Raises:
            DeadLetterWriteError: the record could not be parked or rerouted; do not
                commit it.
        """
        if isinstance(exc, StageExit):
            exit_, failure, stage = exc.exit, exc.failure, exc.stage
        else:
            failure = self.failure_of(exc, hop, mappers=mappers, error_type=error_type)
            exit_, stage = default_exit(failure.error_type, DeadLetter()), None
        if isinstance(exit_, Abort):
            self.abort(hop, failure, run=exit_.run)
            return Settled(failure=failure, aborted=True)
        if isinstance(exit_, Reroute):
            await self.reroute(hop, exit_.topic, failure, producer=producer)
            return Settled(failure=failure, rerouted_to=exit_.topic)
        info = await self.dead_letter(
            hop,
            failure,
            producer=producer,
            dead_letter_topic=stage.dead_letter_topic if stage else None,
            owner=stage.owner if stage else None,
        )
        return Settled(failure=failure, dead_letter=info)

    def abort(self, hop: HopContext, failure: Failure, *, run: bool = True) -> None:
        """Record that a stage stopped on this record; the caller stops consuming.

        :attr:`aborted` is set either way, for the process to wait on; :attr:`abort_scope`
        says whether the declared exit stops the whole run (``run``: exit the process) or
        halts this stage only (``stage``: other subscribers may go on).
        """
        stage = hop.stage or self.component
        self.metrics.stage_decisions.labels(stage, Decision.ABORTED.value).inc()
        self.abort_scope = "run" if run else "stage"
        self.abort_reason = (
            f"stage {stage!r} aborted on {hop.record.describe()}: {failure.error_type.value}"
        )
        logger.critical(
            "%s; no later offset is committed, a restart resumes at this record",
            self.abort_reason,
            extra={
                "hopchain_event": "aborted",
                "topic": hop.record.topic,
                "partition": hop.record.partition,
                "offset": hop.record.offset,
                "error_type": failure.error_type.value,
                "component": self.component,
                "stage": stage,
                "abort_scope": self.abort_scope,
            },
        )
        self.aborted.set()

    def _info(
        self,
        record: ConsumedRecord,
        failure: Failure,
        *,
        group: str,
        owner: str,
        error: DecodeError | None = None,
        envelope: Envelope | None = None,
    ) -> DeadLetterInfo:
        return DeadLetterInfo(
            dead_letter_id=new_envelope_id(),
            reason=error.code if error is not None else None,
            path=error.path if error is not None else None,
            error_type=failure.error_type,
            owner=owner,
            component=self.component,
            group=group,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            source_timestamp_ms=record.timestamp_ms,
            parked_at=datetime.now(UTC),
            failure=failure,
            envelope=envelope,
        )

    async def _park(
        self,
        record: ConsumedRecord,
        info: DeadLetterInfo,
        topic: str,
        producer: DeadLetterProducer,
    ) -> None:
        headers: list[tuple[str, bytes | None]] = [*record.headers, *dead_letter_headers(info)]
        value = record.value
        if value is None and record.key is None:
            # Kafka needs a key or a value; say so rather than invent one silently.
            value = b""
            headers.append(("hopchain-dlq-value", b"null"))
        delay = self.dead_letter_backoff
        for attempt in range(1, self.dead_letter_attempts + 1):
            try:
                await producer.send_and_wait(
                    topic,
                    value=value,
                    key=record.key,
                    timestamp_ms=record.timestamp_ms if record.timestamp_ms >= 0 else None,
                    headers=headers,
                )
            except Exception as exc:  # noqa: BLE001 - any failure means "not parked"
                self.metrics.dead_letter_write_failures.labels(record.topic).inc()
                logger.warning(
                    "could not park %s in %s (attempt %d of %d): %s",
                    record.describe(),
                    topic,
                    attempt,
                    self.dead_letter_attempts,
                    type(exc).__name__,
                    extra={"hopchain_event": "dead_letter_write_failed", "topic": record.topic},
                )
                if attempt < self.dead_letter_attempts:
                    await asyncio.sleep(delay)
                    delay *= 2
            else:
                self.metrics.dead_lettered.labels(
                    record.topic, self.component, info.error_type.value
                ).inc()
                return
        raise DeadLetterWriteError(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            dead_letter_topic=topic,
        )

    # -- producing ---------------------------------------------------------------------------

    def coerce_payload(self, topic: str, body: Any) -> BaseModel:
        """Turn what the caller publishes into the topic's payload model.

        Raises:
            EnvelopeRejected: the body does not satisfy the topic's contract.
        """
        model = self.registry.get(topic).model
        if isinstance(body, model):
            return body
        try:
            if isinstance(body, bytes | str):
                return model.model_validate_json(body)
            if isinstance(body, BaseModel):
                return model.model_validate(body.model_dump())
            return model.model_validate(body)
        except ValidationError as exc:
            error = exc.errors(include_url=False, include_input=False)[0]
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
            raise self._refuse(
                topic, ReasonCode.PAYLOAD_INVALID, error["msg"], f"$.payload{loc}"
            ) from None

    def _refuse(self, topic: str, code: ReasonCode, detail: str, path: str) -> EnvelopeRejected:
        self.metrics.rejected.labels(topic, "produce", code.value).inc()
        return EnvelopeRejected(code, detail, path, topic=topic)

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
        """The received envelope with this component's hop appended.

        What the hop says defaults to what the stage policy recorded on ``hop``: its
        decision (forwarded, recovered, degraded), failure and degradation marker.
        """
        decided = decision or hop.effective_decision
        self.metrics.stage_decisions.labels(hop.stage or self.component, decided.value).inc()
        hop.hops_appended += 1
        base = hop.envelope
        if contract is not None:
            base = base.model_copy(
                update={"contract": contract[0], "contract_version": contract[1]}
            )
        return append_hop(
            base,
            component=self.component,
            instance=self.instance,
            decision=decided,
            span_id=hop.span_id,
            observation=observation,
            received_from=hop.record.position,
            received_at=hop.received_at,
            destination=destination,
            attempts=tuple(hop.attempts if attempts is None else attempts),
            effects=tuple(hop.effects),
            failure=failure or hop.failure,
            degradation=hop.degradation,
            keyring=self.keyring,
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
        """Validate and envelope a record for ``topic``: exactly one new hop.

        With an incoming record, the new hop extends its chain; without one, the record is
        an origin and a new envelope is minted (named by :func:`~hopchain.middleware.origin`).

        Raises:
            EnvelopeRejected: the record breaks the contract; nothing may be sent.
        """
        for name in headers or {}:
            if name.lower().startswith(_RESERVED_HEADER_PREFIX):
                raise self._refuse(
                    topic,
                    ReasonCode.CHAIN_REWRITTEN,
                    f"header {name!r} is written by hopchain; a caller may not set it "
                    "(each hop appends, none rewrites)",
                    f"$.headers.{name}",
                )
        contract = self.registry.get(topic)
        payload = self.coerce_payload(topic, body)
        if incoming is not None:
            envelope = self.append(
                incoming,
                decision=decision,
                destination=topic,
                observation=observation,
                contract=(contract.name, contract.version),
            )
            verified = len(incoming.envelope.chain)
            self._check_extends(topic, incoming.envelope, envelope)
        else:
            envelope = self._originate(topic, trace_id, span_id, observation)
            verified = 0
        try:
            record = self.codec.encode(topic, envelope, payload, verified_hops=verified)
        except EnvelopeRejected as exc:
            self.metrics.rejected.labels(topic, "produce", exc.code.value).inc()
            raise
        return record, envelope

    def _originate(self, topic: str, trace_id: str, span_id: str, observation: str) -> Envelope:
        contract = self.registry.get(topic)
        named = current_origin()
        envelope = new_envelope(
            contract=contract.name,
            contract_version=contract.version,
            run_id=named.run_id if named else f"{self.component}-run",
            work_item_id=named.work_item_id if named else new_envelope_id(),
            intent_key=named.intent_key if named else None,
            trace_id=trace_id,
            origin_span_id=span_id,
        )
        return append_hop(
            envelope,
            component=self.component,
            instance=self.instance,
            decision=Decision.ORIGINATED,
            span_id=span_id,
            observation=observation,
            destination=topic,
            keyring=self.keyring,
        )

    def _check_extends(self, topic: str, received: Envelope, outgoing: Envelope) -> None:
        old, new = received.chain, outgoing.chain
        if len(new) != len(old) + 1 or any(
            a.digest != b.digest for a, b in zip(old, new, strict=False)
        ):
            raise self._refuse(
                topic,
                ReasonCode.CHAIN_REWRITTEN,
                f"the outgoing chain does not extend the received one by exactly one hop "
                f"({len(old)} received, {len(new)} outgoing)",
                "$.chain",
            )

    # -- FastStream --------------------------------------------------------------------------

    def __call__(self, msg: Any | None, /, *, context: Any) -> Any:
        """Make the per-message FastStream middleware (pass the runtime as a middleware)."""
        from hopchain.middleware.faststream import HopchainMiddleware  # noqa: PLC0415

        return HopchainMiddleware(msg, context=context, runtime=self)
