"""Settling a failed record: the stage's declared exit, else the default of its error type."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TypedDict

from hopchain.exceptions import EnvelopeRejected
from hopchain.middleware.attempts import stage_label
from hopchain.middleware.context import HopContext
from hopchain.middleware.engine.parts import EngineParts, dead_letter_info
from hopchain.middleware.engine.publish import Publisher
from hopchain.middleware.engine.writer import DeadLetterWriter, RecordWriter
from hopchain.middleware.failures import ExceptionMapper, failure_from_exception
from hopchain.middleware.policy import Abort, DeadLetter, Reroute, default_exit
from hopchain.middleware.stage import StageExit
from hopchain.schemas import Decision, ErrorType, Failure, ValidationIssue
from hopchain.schemas.deadletter import DeadLetterInfo

__all__ = ["FailOptions", "Settled", "Settler"]

logger = logging.getLogger("hopchain")


class FailOptions(TypedDict, total=False):
    """How a consumer wrapper's ``fail(hop, exc, **options)`` classifies the failure."""

    mappers: tuple[ExceptionMapper, ...]
    """Exception mappers tried, in order, before the defaults of the exception's type."""
    error_type: ErrorType | None
    """The failure's type, when the caller knows it (then ``exc`` is not classified)."""


@dataclass(frozen=True)
class Settled:
    """How a failed record was settled: parked, rerouted, or the stage aborted."""

    failure: Failure
    dead_letter: DeadLetterInfo | None = None
    rerouted_to: str | None = None
    aborted: bool = False


class Settler:
    """Maps a failure to its exit and carries it out (nothing is written on abort)."""

    def __init__(self, parts: EngineParts, publisher: Publisher) -> None:
        self.parts = parts
        self.publisher = publisher

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

    async def settle(
        self,
        hop: HopContext,
        exc: BaseException,
        *,
        writer: RecordWriter,
        mappers: tuple[ExceptionMapper, ...] = (),
        error_type: ErrorType | None = None,
    ) -> Settled:
        """Take the exit for a failed record: the stage's declared one, else the default.

        A declared stage raises :class:`StageExit` with its exit; any other exception gets
        the default exit of its type (``unauthorized`` and ``environment`` abort, the rest
        is dead-lettered). On abort nothing is written: the caller stops consuming without
        committing.

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
            await self.reroute(hop, exit_.topic, failure, writer=writer)
            return Settled(failure=failure, rerouted_to=exit_.topic)
        info = await self.dead_letter(
            hop,
            failure,
            writer=writer,
            dead_letter_topic=stage.dead_letter_topic if stage else None,
            owner=stage.owner if stage else None,
            exception=self.parts.exception_text(exc.__cause__ or exc)
            if isinstance(exc, StageExit)
            else self.parts.exception_text(exc),
        )
        return Settled(failure=failure, dead_letter=info)

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
        """Park a valid record whose handling failed, with a ``dead_lettered`` hop saying so.

        The original record is parked unchanged; the envelope with the appended hop travels
        in the ``hopchain-dlq-envelope`` header.
        """
        parts = self.parts
        contract = parts.registry.get(hop.record.topic)
        topic = dead_letter_topic or contract.dead_letter_topic
        owner = owner or contract.owner
        envelope = self.publisher.append(
            hop,
            decision=Decision.DEAD_LETTERED,
            destination=topic,
            failure=failure,
            observation=observation or f"parked for {owner}: {failure.error_type.value}",
        )
        info = dead_letter_info(
            parts, hop.record, failure, group=hop.group, owner=owner, envelope=envelope
        )
        if exception is not None:
            info = dataclasses.replace(info, exception=exception)
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
                "component": parts.component,
                "envelope_id": hop.envelope.id,
                "dead_letter_topic": topic,
                "dead_letter_id": info.dead_letter_id,
            },
        )
        await parts.dead_letters.park(hop.record, info, topic, writer)
        return info

    async def reroute(
        self, hop: HopContext, topic: str, failure: Failure, *, writer: RecordWriter
    ) -> None:
        """Send the input payload to an alternate topic, with a ``rerouted`` hop.

        Raises:
            DeadLetterWriteError: the alternate topic did not acknowledge the write.
        """
        hop.failure = failure
        record, _ = self.publisher.outgoing(
            topic,
            hop.payload,
            incoming=hop,
            trace_id=hop.trace_id,
            span_id=hop.span_id,
            decision=Decision.REROUTED,
        )
        await DeadLetterWriter.send(hop.record, topic, record.value, record.headers, writer)

    def abort(self, hop: HopContext, failure: Failure, *, run: bool = True) -> None:
        """Record that a stage stopped on this record; the caller stops consuming."""
        parts = self.parts
        stage = stage_label(hop)
        parts.metrics.stage_decisions.labels(stage, Decision.ABORTED.value).inc()
        reason = f"stage {stage!r} aborted on {hop.record.describe()}: {failure.error_type.value}"
        parts.aborted.set(reason, run=run)
        logger.critical(
            "%s; no later offset is committed, a restart resumes at this record",
            reason,
            extra={
                "hopchain_event": "aborted",
                "topic": hop.record.topic,
                "partition": hop.record.partition,
                "offset": hop.record.offset,
                "error_type": failure.error_type.value,
                "component": parts.component,
                "stage": stage,
                "abort_scope": parts.aborted.scope,
            },
        )

    def handled(self, hop: HopContext) -> None:
        """Account for a record handled without sending anything on (a sink).

        Its decision is still counted, so the degradation and retry rates of sinks are
        measured too; a degradation at a sink has no record to carry its marker, so it is
        logged.
        """
        if hop.hops_appended:
            return
        parts = self.parts
        decided = hop.effective_decision
        metrics = parts.metrics
        metrics.child(metrics.stage_decisions, stage_label(hop), decided.value).inc()
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
