"""Declared stages: a handler wrapped in its failure policy.

::

    pipeline = Pipeline("claims")
    classify = pipeline.stage(
        "classify", input="claims.extracted", output="claims.classified", owner="ml-team",
        side_effects_free=True, contract_retries=1,
        on_exhausted=Degrade(Classified(kind="unknown"), reason="classifier gave up"),
    )

    @broker.subscriber("claims.extracted", group_id="classify")
    @broker.publisher("claims.classified")
    @classify
    async def handle(claim: Extracted) -> Classified: ...

Reading ``hopchain policy show app:pipeline`` tells what each stage does when it fails.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel, ValidationError

from hopchain.exceptions import ConfigurationError, ReasonCode
from hopchain.middleware.attempts import run_attempts
from hopchain.middleware.context import HopContext, RetryFeedback, current_hop
from hopchain.middleware.control import is_control_flow
from hopchain.middleware.failures import (
    ExceptionMapper,
    StageFailure,
    classify_exception,
    failure_from_exception,
)
from hopchain.middleware.policy import (
    DeadLetter,
    Degrade,
    Exit,
    TransportRetry,
    default_exit,
)
from hopchain.schemas import (
    AttemptKind,
    Decision,
    Degradation,
    ErrorType,
    Failure,
    ValidationIssue,
)

__all__ = ["Pipeline", "Stage", "StageExit"]

P = ParamSpec("P")
R = TypeVar("R")

_STAGE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_CONTRACT_RETRYABLE = frozenset({ErrorType.CONTRACT_VIOLATION, ErrorType.CONFLICT})


class StageExit(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A stage gave up; the middleware takes the declared exit. Never escapes the consumer."""

    def __init__(self, stage: Stage, exit_: Exit, failure: Failure) -> None:
        super().__init__(f"stage {stage.name!r} takes exit {exit_!r} on {failure.error_type.value}")
        self.stage = stage
        self.exit = exit_
        self.failure = failure


class _OutputInvalid(Exception):  # noqa: N818 - internal signal
    def __init__(self, issues: tuple[ValidationIssue, ...]) -> None:
        super().__init__(f"{len(issues)} contract issue(s) in the stage output")
        self.issues = issues


def _issues(exc: ValidationError) -> tuple[ValidationIssue, ...]:
    issues = []
    for error in exc.errors(include_url=False, include_input=False)[:20]:
        path = "$" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]
        )
        issues.append(
            ValidationIssue(code=ReasonCode.PAYLOAD_INVALID, message=error["msg"], path=path)
        )
    return tuple(issues)


@dataclass(frozen=True)
class Stage:
    """A stage and the policy it declares for its failures.

    Attributes:
        name: the stage's name (hops, metrics and dead letters carry it).
        input: the topic it reads.
        output: the topic its result goes to; None for a sink.
        owner: who is paged for its dead letters.
        side_effects_free: whether running it again can do no harm. Only such stages get
            contract retries (which re-run them).
        idempotent: a stage with side effects that passes its idempotency key to its
            target (see ``HopContext.once``), so transport retries are safe.
        contract_retries: re-runs with the validation errors as feedback.
        transport: retries in place for transient failures; defaults to 3 with backoff
            for stages that are safe to retry, and none otherwise.
        on_exhausted: the exit when the budgets run out (or for rejected input).
        on_error: exits per error type, overriding the defaults (unauthorized and
            environment abort; internal and malformed dead-letter).
        mappers: hooks that map third-party exceptions to error types.
        rules: rules of the output, repeated to a contract retry in its brief.
        dead_letter_topic: where to park; defaults to the input topic's dead-letter topic.
    """

    name: str
    input: str
    output: str | None
    owner: str
    side_effects_free: bool
    idempotent: bool = False
    contract_retries: int = 0
    transport: TransportRetry | None = None
    on_exhausted: Exit = field(default_factory=DeadLetter)
    on_error: Mapping[ErrorType, Exit] = field(default_factory=lambda: MappingProxyType({}))
    mappers: tuple[ExceptionMapper, ...] = ()
    rules: tuple[str, ...] = ()
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if not _STAGE_NAME.match(self.name):
            raise ConfigurationError(
                f"stage name {self.name!r} must be 1-100 letters, digits, '.', '_' or '-' "
                "(it is a metric label and a header value)"
            )
        if self.contract_retries < 0:
            raise ConfigurationError(f"stage {self.name!r}: contract_retries must be >= 0")
        if self.contract_retries and not self.side_effects_free:
            raise ConfigurationError(
                f"stage {self.name!r} has side effects but declares {self.contract_retries} "
                "contract retries: a contract retry re-runs the stage; set "
                "side_effects_free=True only if re-running it can do no harm"
            )
        retry_safe = self.side_effects_free or self.idempotent
        if self.transport is None:
            object.__setattr__(self, "transport", TransportRetry(retries=3 if retry_safe else 0))
        elif self.transport.retries and not retry_safe:
            raise ConfigurationError(
                f"stage {self.name!r} has side effects and is not idempotent by key, but "
                f"declares {self.transport.retries} transport retries: make it idempotent "
                "(pass the stage key to the target, idempotent=True) or declare retries=0"
            )

    @property
    def transport_policy(self) -> TransportRetry:
        """The transport retry policy in force."""
        return self.transport or TransportRetry(retries=0)

    def exit_for(self, error_type: ErrorType) -> Exit:
        """The exit this stage takes for a failure of ``error_type`` once out of budget."""
        return self.on_error.get(error_type) or default_exit(error_type, self.on_exhausted)

    def __call__(self, func: Callable[P, Any]) -> Callable[P, Any]:
        """Wrap a handler in this stage's policy, keeping its signature for FastStream."""

        @functools.wraps(func)
        async def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            return await self.run(func, *args, **kwargs)

        # The handler's parameters stay visible to FastStream; its return annotation does
        # not, because the stage returns the checked output (or a declared substitute).
        run.__signature__ = inspect.signature(func).replace(  # type: ignore[attr-defined]
            return_annotation=inspect.Signature.empty
        )
        run.__annotations__ = {k: v for k, v in func.__annotations__.items() if k != "return"}
        return run

    async def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the handler under this policy for the record being handled."""
        hop = current_hop()
        if hop is None:
            raise ConfigurationError(
                f"stage {self.name!r} ran outside a hopchain consumer; install the middleware "
                "(KafkaBroker(..., middlewares=[HopchainMiddleware(hopchain)])) or use "
                "EnvelopeConsumer"
            )
        hop.stage = self.name
        return await _StagePolicy(self, hop).run(func, args, kwargs)


class _StagePolicy:
    """One record's policy at a stage: both budgets, the declared exit; every attempt recorded.

    A :class:`~hopchain.middleware.attempts.RetryPolicy` for the one retry loop.
    """

    def __init__(self, stage: Stage, hop: HopContext) -> None:
        self.stage = stage
        self.hop = hop
        self.transport_used = 0
        self.contract_used = 0

    async def run(self, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        async def attempt() -> Any:
            result = func(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            output = self._checked(result)
            self.hop.feedback = None
            return output

        return await run_attempts(self.hop, self, attempt)

    def passes(self, exc: Exception) -> bool:
        return is_control_flow(exc)

    def records(
        self,
        kind: AttemptKind,  # noqa: ARG002 - the policy's signature
        error_type: ErrorType | None,  # noqa: ARG002
    ) -> bool:
        return True

    def describe(self, exc: Exception) -> str:
        if isinstance(exc, _OutputInvalid):
            return f"{len(exc.issues)} output field(s) failed the contract"
        return type(exc).__name__

    def _checked(self, result: Any) -> Any:
        output_topic = self.stage.output
        registry = self.hop.registry
        if output_topic is None or registry is None or result is None:
            return result
        model = registry.get(output_topic).model
        try:
            if isinstance(result, BaseModel):
                return model.model_validate_json(result.__pydantic_serializer__.to_json(result))
            return model.model_validate(result)
        except ValidationError as exc:
            raise _OutputInvalid(_issues(exc)) from None

    def classify(self, exc: Exception) -> tuple[ErrorType, tuple[ValidationIssue, ...]]:
        if isinstance(exc, _OutputInvalid):
            return ErrorType.CONTRACT_VIOLATION, exc.issues
        if isinstance(exc, ValidationError):
            # The handler failed to build its own output: the stage broke its contract.
            return ErrorType.CONTRACT_VIOLATION, _issues(exc)
        error_type = classify_exception(exc, self.stage.mappers)
        if (
            error_type is ErrorType.CONTRACT_VIOLATION
            and isinstance(exc, StageFailure)
            and exc.description
        ):
            # What the handler found wrong is the feedback a contract retry needs.
            issue = ValidationIssue(
                code=ReasonCode.PAYLOAD_INVALID, message=exc.description[:1000], path="$"
            )
            return error_type, (issue,)
        return error_type, ()

    async def retry(
        self, error_type: ErrorType, issues: tuple[ValidationIssue, ...]
    ) -> AttemptKind | None:
        stage = self.stage
        if error_type is ErrorType.TRANSIENT:
            policy = stage.transport_policy
            if self.transport_used < policy.retries:
                self.transport_used += 1
                await asyncio.sleep(policy.backoff.delay(self.transport_used))
                return AttemptKind.TRANSPORT
            return None
        if error_type in _CONTRACT_RETRYABLE and self.contract_used < stage.contract_retries:
            self.contract_used += 1
            self.hop.feedback = RetryFeedback(
                attempt=len(self.hop.attempts),
                issues=issues,
                rules=stage.rules,
                error_type=error_type,
            )
            return AttemptKind.CONTRACT
        return None

    def exhausted(self, exc: Exception, error_type: ErrorType) -> Any:
        stage, hop = self.stage, self.hop
        failure = failure_from_exception(exc, hop, mappers=stage.mappers, error_type=error_type)
        if isinstance(exc, _OutputInvalid | ValidationError):
            failure = failure.model_copy(
                update={
                    "description": f"output failed its contract after {len(hop.attempts)} "
                    "attempt(s)",
                    "validation_errors": exc.issues
                    if isinstance(exc, _OutputInvalid)
                    else _issues(exc),
                }
            )
        # Out of budget, the stage has no path of its own left to a correct result.
        failure = failure.model_copy(update={"locally_resolvable": False})
        exit_ = stage.exit_for(error_type)
        if isinstance(exit_, Degrade):
            try:
                substitute = self._checked(exit_.make(hop.payload, failure))
            except _OutputInvalid as invalid:
                # Publishing it would be refused after the handler returned, and the record
                # committed with nothing sent: park it instead, as the owner's bug.
                raise self._substitute_refused(failure, invalid) from exc
            hop.decision = Decision.DEGRADED
            hop.failure = failure
            hop.degradation = Degradation(
                error_type=error_type, reason=exit_.reason[:1000], stage=stage.name
            )
            return substitute
        raise StageExit(stage, exit_, failure) from exc

    def _substitute_refused(self, failure: Failure, invalid: _OutputInvalid) -> StageExit:
        stage = self.stage
        refused = failure.model_copy(
            update={
                "error_type": ErrorType.INTERNAL,
                "description": f"stage {stage.name!r} could not degrade: its declared substitute "
                f"fails the contract of {stage.output} ({len(invalid.issues)} issue(s)); the "
                f"stage had failed with {failure.error_type.value}: {failure.description}"[:2000],
                "validation_errors": invalid.issues,
                "locally_resolvable": False,
            }
        )
        exit_ = stage.exit_for(ErrorType.INTERNAL)
        return StageExit(stage, DeadLetter() if isinstance(exit_, Degrade) else exit_, refused)


@dataclass
class Pipeline:
    """The stages of one pipeline, so their policies can be read in one place."""

    name: str
    stages: list[Stage] = field(default_factory=list)

    def stage(self, name: str, **declaration: Any) -> Stage:
        """Declare a stage of this pipeline (the arguments of :class:`Stage`)."""
        if any(existing.name == name for existing in self.stages):
            raise ConfigurationError(f"pipeline {self.name!r} already has a stage {name!r}")
        declared = Stage(name=name, **declaration)
        self.stages.append(declared)
        return declared

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def by_name(self) -> Mapping[str, Stage]:
        """Stages by name."""
        return {stage.name: stage for stage in self.stages}


def stages_of(obj: object) -> Sequence[Stage]:
    """The stages of a pipeline, a stage, or an iterable of stages (for the CLI)."""
    if isinstance(obj, Stage):
        return [obj]
    if isinstance(obj, Pipeline):
        return list(obj.stages)
    candidate = getattr(obj, "pipeline", None) or getattr(obj, "stages", None)
    if candidate is not None and candidate is not obj:
        return stages_of(candidate)
    if isinstance(obj, list | tuple) and all(isinstance(item, Stage) for item in obj):
        return list(obj)
    raise ConfigurationError(f"{type(obj).__name__} is not a Pipeline, a Stage or a list of stages")
