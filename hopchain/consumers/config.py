"""Settings of the dead-letter consumer, from keyword arguments or ``HOPCHAIN_*`` variables.

Every field is also an environment variable: the field name upper-cased with the
``HOPCHAIN_`` prefix (``dlq_port`` is ``HOPCHAIN_DLQ_PORT``). Dictionaries and lists are
written as JSON (``HOPCHAIN_DLQ_TOPICS='{"orders.dlq": "payments"}'``).
"""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hopchain.schemas.contracts import DEAD_LETTER_SUFFIX

__all__ = ["DEFAULT_RESOLUTIONS_TOPIC", "DEFAULT_TOPIC_PATTERN", "DlqSettings"]

DEFAULT_RESOLUTIONS_TOPIC = "hopchain.dlq.resolutions"
DEFAULT_TOPIC_PATTERN = ".*" + re.escape(DEAD_LETTER_SUFFIX)


class DlqSettings(BaseSettings):
    """How the dead-letter consumer finds its topics, serves its metrics and redrives."""

    model_config = SettingsConfigDict(
        env_prefix="HOPCHAIN_",
        extra="ignore",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    kafka_bootstrap: str = "127.0.0.1:9092"
    """``host:port[,host:port...]`` of the Kafka cluster holding the dead-letter topics."""

    dlq_contracts: str | None = None
    """A contracts registry as ``module:attribute`` (a ``ContractRegistry``, or a callable
    returning one); every dead-letter topic it declares is consumed, with its owner."""

    dlq_topics: dict[str, str] = Field(default_factory=dict)
    """Dead-letter topics to consume, each with the owner paged for it."""

    dlq_topic_pattern: str | None = None
    """A regular expression; every existing topic whose whole name matches it is consumed
    (checked again every ``dlq_refresh_seconds``). When no contracts, topics or pattern are
    given, ``.*\\.dlq`` is used."""

    dlq_resolutions_topic: str = DEFAULT_RESOLUTIONS_TOPIC
    """The compacted topic holding one resolution (redriven, discarded) per dead-letter id."""

    dlq_create_topics: bool = True
    """Create missing dead-letter topics (retention.ms=-1, retention.bytes=-1) and the
    resolutions topic (cleanup.policy=compact) at start-up."""

    dlq_topic_partitions: int = Field(default=1, ge=1)
    """Partitions of a dead-letter or resolutions topic created by the consumer."""

    dlq_replication_factor: int = Field(default=1, ge=1)
    """Replication factor of the topics the consumer creates."""

    dlq_host: str = "127.0.0.1"
    """Address the HTTP server (metrics, health, triage) binds to."""

    dlq_port: int = Field(default=9478, ge=0, le=65535)
    """Port of the HTTP server; 0 picks a free one."""

    dlq_trace_url: str | None = None
    """A link into your tracing UI, with ``{trace_id}`` where the trace id goes (e.g.
    ``https://jaeger.example/trace/{trace_id}``); the console links each dead letter's trace
    with it. Without one, no link is shown."""

    dlq_token: SecretStr | None = None
    """Bearer token for the mutating endpoints (discard, redrive). Without one they are
    disabled; with one, a request without it is refused with 401."""

    dlq_redrive_limit: int = Field(default=3, ge=1)
    """How many times one record may be redriven before a redrive is refused (unless
    forced): a record that keeps failing is in a loop, not unlucky."""

    dlq_component: str = "hopchain-dlq"
    """The component name written into the ``redriven`` hop."""

    dlq_refresh_seconds: float = Field(default=30.0, gt=0)
    """How often topics matching the pattern, and partitions of known topics, are looked up
    again."""

    dlq_request_timeout_seconds: float = Field(default=30.0, gt=0)
    """Timeout of one Kafka request (metadata, fetch of a single record, produce)."""

    @field_validator("dlq_token", mode="before")
    @classmethod
    def _no_empty_token(cls, value: object) -> object:
        # An empty HOPCHAIN_DLQ_TOKEN= must disable the endpoints, not accept an empty token.
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, SecretStr) and not value.get_secret_value().strip():
            return None
        return value

    @field_validator("dlq_trace_url")
    @classmethod
    def _trace_template(cls, value: str | None) -> str | None:
        if value is not None and (
            "{trace_id}" not in value or not value.startswith(("http://", "https://"))
        ):
            msg = (
                f"dlq_trace_url {value!r} must be an http(s) address holding {{trace_id}}, "
                "e.g. 'https://jaeger.example/trace/{trace_id}'"
            )
            raise ValueError(msg)
        return value

    @field_validator("dlq_topic_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"dlq_topic_pattern {value!r} is not a regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    @field_validator("dlq_contracts")
    @classmethod
    def _module_attribute(cls, value: str | None) -> str | None:
        if value is not None and value.count(":") != 1:
            msg = (
                f"dlq_contracts {value!r} must be 'module:attribute', e.g. 'myapp.topics:registry'"
            )
            raise ValueError(msg)
        return value

    @property
    def effective_pattern(self) -> str | None:
        """The pattern to match topics with, including the default when nothing is named."""
        if self.dlq_topic_pattern is not None:
            return self.dlq_topic_pattern
        if self.dlq_contracts is None and not self.dlq_topics:
            return DEFAULT_TOPIC_PATTERN
        return None
