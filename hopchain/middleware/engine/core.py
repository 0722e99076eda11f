"""The engine of one component: :class:`Hopchain`, shared by every client adapter.

It knows no Kafka client. An adapter (the FastStream middleware, the aiokafka wrapper)
hands it the records it reads as :class:`~hopchain.schemas.record.ConsumedRecord` and a
:class:`~hopchain.middleware.engine.writer.RecordWriter` to park with; the engine validates,
builds hops, decides exits and writes dead letters. Each step is a small object that
receives only the collaborators it needs (:class:`~hopchain.middleware.engine.parts.EngineParts`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry

from hopchain.config import HopchainConfig
from hopchain.exceptions import ConfigurationError
from hopchain.loading import load_registry
from hopchain.middleware.dedupe import DedupeStore, MemoryDedupeStore
from hopchain.middleware.engine.abort import AbortState
from hopchain.middleware.engine.consume import Receiver
from hopchain.middleware.engine.parts import EngineParts, ExceptionCapture
from hopchain.middleware.engine.publish import Publisher
from hopchain.middleware.engine.retry import DefaultRetry
from hopchain.middleware.engine.settle import Settler
from hopchain.middleware.engine.writer import DeadLetterWriter
from hopchain.middleware.metrics import MiddlewareMetrics
from hopchain.middleware.policy import Backoff, TransportRetry
from hopchain.schemas import (
    ContractRegistry,
    EnvelopeCodec,
    Keyring,
    Limits,
)

__all__ = ["Hopchain"]


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

    What it does is done by three steps, whose methods it offers as its own:
    :class:`Receiver` (``accept``, ``handling``, ``open``, ``reject``, ``reporting``,
    ``would_reject``),
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
            registry = load_registry(self.config.contracts)
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
            self.parts,
            TransportRetry(
                retries=self.config.transport_retries,
                backoff=Backoff(initial=self.config.transport_backoff_seconds),
            ),
        )
        # The steps' own methods, so that callers need not know which step does what.
        self.accept = self.receiver.accept
        self.reporting = self.receiver.reporting
        self.would_reject = self.receiver.would_reject
        self.open = self.receiver.open
        self.handling = self.receiver.handling
        self.reject = self.receiver.reject
        self.coerce_payload = self.publisher.coerce_payload
        self.append = self.publisher.append
        self.outgoing = self.publisher.outgoing
        self.sending = self.publisher.sending
        self.failure_of = self.settler.failure_of
        self.settle = self.settler.settle
        self.dead_letter = self.settler.dead_letter
        self.abort = self.settler.abort
        self.handled = self.settler.handled

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

    def check_topics(self, topics: Iterable[str]) -> None:
        """Refuse to start when a topic has no contract (names the topic and the fix)."""
        self.registry.require(topics)
