"""One configuration object for every part of hopchain: :class:`HopchainConfig`.

The middleware, the dead-letter service and the command line read the same object, so one
variable means one thing everywhere. Each value comes from, in order:

1. an explicit argument (``HopchainConfig(kafka_bootstrap="kafka:9092")``),
2. its environment variable, named ``HOPCHAIN_`` + the field name upper-cased
   (``kafka_bootstrap`` is ``HOPCHAIN_KAFKA_BOOTSTRAP``),
3. the default documented on the field.

Dictionaries and lists are written as JSON in variables
(``HOPCHAIN_DLQ_TOPICS='{"orders.dlq": "payments"}'``). The environment is read when the
object is built, never later behind the caller's back. An invalid value fails there, with
one line naming the variable and what it should look like.
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from hopchain.exceptions import ConfigurationError
from hopchain.schemas import DEAD_LETTER_SUFFIX, Keyring

__all__ = [
    "DEFAULT_RESOLUTIONS_TOPIC",
    "DEFAULT_TOPIC_PATTERN",
    "ENV_PREFIX",
    "LOGIN_ARGUMENTS",
    "MIN_KEY_BYTES",
    "HopchainConfig",
    "parse_hmac_keys",
]

ENV_PREFIX = "HOPCHAIN_"
MIN_KEY_BYTES = 16
DEFAULT_RESOLUTIONS_TOPIC = "hopchain.dlq.resolutions"
DEFAULT_TOPIC_PATTERN = ".*" + re.escape(DEAD_LETTER_SUFFIX)
_SECRET_FIELDS = frozenset({"hmac_keys", "kafka_sasl_password", "dlq_token", "dlq_resolution_key"})
_SECURITY_FIELDS = frozenset(
    {
        "kafka_security_protocol",
        "kafka_sasl_mechanism",
        "kafka_sasl_username",
        "kafka_sasl_password",
    }
)
LOGIN_ARGUMENTS = frozenset(
    {
        "security_protocol",
        "ssl_context",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
    }
)
"""The keyword arguments of an aiokafka client that say how it logs in."""
_KAFKA_DEFAULT_REQUEST_BYTES = 1048576


def env_name(field: str) -> str:
    """The environment variable of a configuration field."""
    return f"{ENV_PREFIX}{field.upper()}"


def parse_hmac_keys(text: str) -> dict[str, bytes]:
    """Parse ``component=base64key,...`` into keys by component.

    Raises:
        ConfigurationError: an entry is malformed; the message names the entry, never a key.
    """
    keys: dict[str, bytes] = {}
    for position, entry in enumerate(part.strip() for part in text.split(",")):
        if not entry:
            continue
        component, sep, encoded = entry.partition("=")
        name = component.strip()
        if not sep or not name:
            raise ConfigurationError(
                f"HOPCHAIN_HMAC_KEYS entry {position} is not component=base64key"
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except binascii.Error:
            raise ConfigurationError(
                f"HOPCHAIN_HMAC_KEYS key for {name!r} is not valid base64"
            ) from None
        if len(key) < MIN_KEY_BYTES:
            raise ConfigurationError(
                f"HOPCHAIN_HMAC_KEYS key for {name!r} is {len(key)} bytes; "
                f"use at least {MIN_KEY_BYTES} random bytes"
            )
        keys[name] = key
    return keys


def _one_line(exc: ValidationError) -> str:
    """The first problem of a validation error, named by its variable, on one line."""
    error = exc.errors(include_url=False)[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    message = str(error["msg"]).removeprefix("Value error, ")
    shown = "" if field in _SECRET_FIELDS else f"={error.get('input')!r}"
    return f"{env_name(field)}{shown}: {message}"


class HopchainConfig(BaseSettings):
    """Connection, security, middleware and dead-letter service settings.

    Raises:
        ConfigurationError: a value (given or from the environment) is invalid; the message
            names the variable and the fix.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigurationError(_one_line(exc)) from None
        except SettingsError as exc:
            # A dictionary or list variable that is not JSON fails while it is read.
            found = re.search(r'field "(\w+)"', str(exc))
            name = env_name(found[1]) if found else f"a {ENV_PREFIX}* variable"
            raise ConfigurationError(
                f"{name}: not JSON; write dictionaries and lists as JSON, "
                """e.g. HOPCHAIN_DLQ_TOPICS='{"orders.dlq": "payments"}'"""
            ) from None

    # -- Kafka connection ----------------------------------------------------------------------

    kafka_bootstrap: str = "127.0.0.1:9092"
    """``host:port[,host:port...]`` of the Kafka cluster (HOPCHAIN_KAFKA_BOOTSTRAP), for the
    command line and the dead-letter service. The middleware and the wrappers connect where
    the broker or client they wrap connects, with its login; set this (and the security
    settings) only to park dead letters on another cluster: given, it overrides theirs."""

    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """The listener's protocol (HOPCHAIN_KAFKA_SECURITY_PROTOCOL)."""

    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    """The SASL mechanism, for the SASL protocols (HOPCHAIN_KAFKA_SASL_MECHANISM)."""

    kafka_sasl_username: str | None = None
    """The SASL user name (HOPCHAIN_KAFKA_SASL_USERNAME)."""

    kafka_sasl_password: SecretStr | None = None
    """The SASL password (HOPCHAIN_KAFKA_SASL_PASSWORD); never logged."""

    # -- contracts and integrity ---------------------------------------------------------------

    contracts: str | None = None
    """The topic contracts as ``module:attribute`` (HOPCHAIN_CONTRACTS): a
    ``ContractRegistry``, an object holding one as ``registry`` or ``contracts``, or a
    callable returning one. The ``--contracts`` flag of every command means the same."""

    schema_registry_url: str | None = None
    """The schema registry's Confluent-compatible API (HOPCHAIN_SCHEMA_REGISTRY_URL), e.g.
    ``http://registry:8081`` (for Apicurio ``.../apis/ccompat/v7``): where contracts with a
    registry payload format (``AvroFormat``) look their schemas up, unless the format names
    its own ``registry_url``. Given in code (``HopchainConfig(schema_registry_url=...)``), it
    reaches the formats of the contracts a ``Hopchain`` engine is given, and ``prepare()``:
    the format's own URL first, then this, then the environment. ``hopchain dev registry
    start`` prints it for a local one."""

    hmac_keys: SecretStr | None = None
    """HMAC keys by component, ``component=base64key,...`` (HOPCHAIN_HMAC_KEYS). A component
    signs its hops with its own key; a reader holding a component's key refuses that
    component's unsigned or forged hops (``unsigned_hop``, ``bad_signature``)."""

    # -- middleware ----------------------------------------------------------------------------

    dead_letter_attempts: int = Field(default=3, ge=1)
    """Writes of one dead letter tried before its partition is paused and retried later
    (HOPCHAIN_DEAD_LETTER_ATTEMPTS); its offset is never committed unparked."""

    dead_letter_backoff_seconds: float = Field(default=0.2, ge=0)
    """Pause before the first retry of a dead-letter write, doubled each time
    (HOPCHAIN_DEAD_LETTER_BACKOFF_SECONDS)."""

    dead_letter_max_bytes: int | None = Field(default=None, ge=64 * 1024)
    """The most bytes one dead letter may take, to lower what the dead-letter topic allows
    (HOPCHAIN_DEAD_LETTER_MAX_BYTES; at least 64 KiB, so that a reference still fits). The
    FastStream middleware's own writer is sized at ``prepare()`` from its dead-letter topics'
    ``max.message.bytes`` (the largest of them; 1 MiB, Kafka's client default, until then or
    when it cannot be read); this only lowers that size. A record that does not fit is parked
    as a reference: its key, headers, size, SHA-256 and source position, without the value."""

    grow_dead_letter_topics: bool = True
    """Let the FastStream middleware's ``prepare()`` raise the ``max.message.bytes`` of a
    dead-letter topic whose source now allows larger records, changing nothing else
    (HOPCHAIN_GROW_DEAD_LETTER_TOPICS). Turn it off where topics are managed elsewhere: a
    topic too small is then reported (an ERROR line with the command that fixes it) and left
    as it is. The dead-letter service follows HOPCHAIN_DLQ_CREATE_TOPICS instead."""

    transport_retries: int = Field(default=3, ge=0)
    """Retries in place of a ``transient`` failure of a handler that declares no stage
    (HOPCHAIN_TRANSPORT_RETRIES); a declared stage uses its own budget."""

    transport_backoff_seconds: float = Field(default=0.1, ge=0)
    """Pause before the first of those retries, doubled each time up to 5 s, with jitter
    (HOPCHAIN_TRANSPORT_BACKOFF_SECONDS)."""

    capture_exceptions: bool = False
    """Put a failed handler's exception type, message and stack trace into its dead letter
    (``hopchain-dlq-exception``) (HOPCHAIN_CAPTURE_EXCEPTIONS). Off by default: messages
    may quote payloads. Pass ``Hopchain(redact=...)`` to scrub the text first."""

    exception_limit_bytes: int = Field(default=4096, ge=256)
    """The most of that text kept, in UTF-8 bytes (HOPCHAIN_EXCEPTION_LIMIT_BYTES)."""

    report_only: bool = False
    """Validate every record but park none (HOPCHAIN_REPORT_ONLY): what enforcing would park
    is counted in ``hopchain_would_reject_total``, logged and traced, and handed to the
    handler as if hopchain were not there. For switching hopchain on in a live estate;
    ``TopicContract(report_only=True)`` does the same for one topic."""

    commits: Literal["auto", "record", "batched"] = "auto"
    """Who commits the offsets of the FastStream subscribers hopchain wraps (HOPCHAIN_COMMITS).
    ``auto``: the subscribers' ``ack_policy`` says: ``AckPolicy.MANUAL`` (what
    ``HopchainMiddleware.ack_policy`` gives) means batched, ``AckPolicy.ACK`` per record.
    ``batched``: hopchain commits, per partition, every offset below which all records are
    settled (outputs or dead letters acknowledged), without waiting per record
    (subscribers use ``AckPolicy.MANUAL``). ``record``: FastStream commits after each
    record (subscribers use ``AckPolicy.ACK``)."""

    commit_interval_seconds: float = Field(default=0.5, gt=0)
    """In batched mode, the longest a settled record waits for its commit
    (HOPCHAIN_COMMIT_INTERVAL_SECONDS)."""

    commit_max_records: int = Field(default=1000, ge=1)
    """In batched mode, settled records that trigger a commit before the interval ends
    (HOPCHAIN_COMMIT_MAX_RECORDS)."""

    # -- dead-letter service -------------------------------------------------------------------

    dlq_topics: dict[str, str] = Field(default_factory=dict)
    """Dead-letter topics to consume, each with the owner paged for it (HOPCHAIN_DLQ_TOPICS)."""

    dlq_topic_pattern: str | None = None
    """A regular expression; every existing topic whose whole name matches it is consumed
    (checked again every ``dlq_refresh_seconds``) (HOPCHAIN_DLQ_TOPIC_PATTERN). When no
    contracts, topics or pattern are given, ``.*\\.dlq`` is used."""

    dlq_resolutions_topic: str = DEFAULT_RESOLUTIONS_TOPIC
    """The compacted topic holding one resolution (redriven, discarded) per dead-letter id
    (HOPCHAIN_DLQ_RESOLUTIONS_TOPIC)."""

    dlq_create_topics: bool = True
    """Create missing dead-letter topics (retention.ms=-1, retention.bytes=-1) and the
    resolutions topic (cleanup.policy=compact) at start-up, and raise the max.message.bytes
    of a dead-letter topic its source outgrew (HOPCHAIN_DLQ_CREATE_TOPICS)."""

    dlq_topic_partitions: int = Field(default=1, ge=1)
    """Partitions of a dead-letter or resolutions topic the service creates
    (HOPCHAIN_DLQ_TOPIC_PARTITIONS)."""

    dlq_replication_factor: int = Field(default=1, ge=1)
    """Replication factor of the topics the service creates (HOPCHAIN_DLQ_REPLICATION_FACTOR)."""

    dlq_host: str = "127.0.0.1"
    """Address the service's HTTP server binds to (HOPCHAIN_DLQ_HOST)."""

    dlq_port: int = Field(default=9478, ge=0, le=65535)
    """Port of the service's HTTP server; 0 picks a free one (HOPCHAIN_DLQ_PORT)."""

    dlq_tls_certfile: str | None = None
    """PEM certificate chain to serve HTTPS with (HOPCHAIN_DLQ_TLS_CERTFILE); needs
    ``dlq_tls_keyfile``. Without both, the service speaks plain HTTP: keep it on loopback
    behind a TLS-terminating proxy, since the bearer token travels in every request."""

    dlq_tls_keyfile: str | None = None
    """PEM private key of ``dlq_tls_certfile`` (HOPCHAIN_DLQ_TLS_KEYFILE)."""

    dlq_trace_url: str | None = None
    """A link into your tracing UI, with ``{trace_id}`` where the trace id goes (e.g.
    ``https://jaeger.example/trace/{trace_id}``) (HOPCHAIN_DLQ_TRACE_URL); the console links
    each dead letter's trace with it. Without one, no link is shown."""

    dlq_token: SecretStr | None = None
    """Bearer token for the mutating endpoints (discard, redrive) (HOPCHAIN_DLQ_TOKEN).
    Without one they are disabled; with one, a request without it is refused with 401."""

    dlq_resolution_key: SecretStr | None = None
    """Base64 key (at least 16 bytes) that signs every resolution and claim written to the
    resolutions topic (HOPCHAIN_DLQ_RESOLUTION_KEY). With one, a resolution without a valid
    signature (written by anyone else who can write the topic) is ignored and counted in
    ``hopchain_dlq_resolutions_ignored_total``; give every service replica and CLI the same
    key. Without one, resolutions are neither signed nor checked."""

    dlq_claim_seconds: float = Field(default=120.0, gt=0)
    """How long a redrive's claim on a dead letter keeps every other triage instance from
    redriving it (HOPCHAIN_DLQ_CLAIM_SECONDS). A claim whose holder died before writing the
    resolution expires after this; keep it above the time one redrive can take (about two
    request timeouts)."""

    dlq_max_request_bytes: int = Field(default=_KAFKA_DEFAULT_REQUEST_BYTES, ge=1024)
    """Largest request the triage producer sends, so the largest record it can redrive
    (HOPCHAIN_DLQ_MAX_REQUEST_BYTES; Kafka's client default, 1 MiB). Raise it together with
    the source topic's ``max.message.bytes`` to redrive records larger than 1 MiB."""

    dlq_redrive_limit: int = Field(default=3, ge=1)
    """How many times one record may be redriven before a redrive is refused unless forced
    (HOPCHAIN_DLQ_REDRIVE_LIMIT): a record that keeps failing is in a loop, not unlucky."""

    dlq_component: str = "hopchain-dlq"
    """The component name written into the ``redriven`` hop (HOPCHAIN_DLQ_COMPONENT)."""

    dlq_refresh_seconds: float = Field(default=30.0, gt=0)
    """How often matching topics and partitions are looked up again
    (HOPCHAIN_DLQ_REFRESH_SECONDS)."""

    dlq_request_timeout_seconds: float = Field(default=30.0, gt=0)
    """Timeout of one Kafka request of the service (HOPCHAIN_DLQ_REQUEST_TIMEOUT_SECONDS)."""

    dlq_index_path: str = Field(default="~/.local/share/hopchain/dlq-index.sqlite", min_length=1)
    """The SQLite file the service keeps its index in, resumed on restart
    (HOPCHAIN_DLQ_INDEX_PATH); ``:memory:`` keeps it in memory, rebuilt on every start. A lost
    or damaged file is rebuilt from Kafka. Give every replica a file of its own."""

    # -- validation ----------------------------------------------------------------------------

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        servers = [part.strip() for part in value.split(",")]
        if not all(re.fullmatch(r"[^\s:,]+:\d{1,5}", server) for server in servers):
            msg = "expected host:port[,host:port...], e.g. 127.0.0.1:9092"
            raise ValueError(msg)
        return ",".join(servers)

    @field_validator("hmac_keys")
    @classmethod
    def _keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        try:
            parse_hmac_keys(value.get_secret_value())
        except ConfigurationError as exc:
            raise ValueError(str(exc).removeprefix("HOPCHAIN_HMAC_KEYS ")) from None
        return value

    @field_validator("dlq_token", mode="before")
    @classmethod
    def _no_empty_token(cls, value: object) -> object:
        # An empty HOPCHAIN_DLQ_TOKEN= must disable the endpoints, not accept an empty token.
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, SecretStr) and not value.get_secret_value().strip():
            return None
        return value

    @field_validator("dlq_resolution_key", mode="before")
    @classmethod
    def _resolution_key(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and not text.strip():
            return None
        if isinstance(text, str):
            try:
                key = base64.b64decode(text.strip(), validate=True)
            except binascii.Error:
                msg = "not valid base64"
                raise ValueError(msg) from None
            if len(key) < MIN_KEY_BYTES:
                msg = f"{len(key)} bytes; use at least {MIN_KEY_BYTES} random bytes, base64-encoded"
                raise ValueError(msg)
        return value

    @field_validator("dlq_trace_url")
    @classmethod
    def _trace_template(cls, value: str | None) -> str | None:
        if value is not None and (
            "{trace_id}" not in value or not value.startswith(("http://", "https://"))
        ):
            msg = "must be an http(s) address holding {trace_id}, e.g. 'https://jaeger.example/trace/{trace_id}'"
            raise ValueError(msg)
        return value

    @field_validator("schema_registry_url")
    @classmethod
    def _registry_address(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            msg = "must be an http(s) address, e.g. 'http://registry:8081'"
            raise ValueError(msg)
        return value.rstrip("/") if value else None

    @field_validator("dlq_topic_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"not a regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    @field_validator("contracts")
    @classmethod
    def _module_attribute(cls, value: str | None) -> str | None:
        if value is not None and value.count(":") != 1:
            msg = "expected MODULE:ATTRIBUTE, e.g. 'myapp.topics:registry'"
            raise ValueError(msg)
        return value

    @model_validator(mode="after")
    def _tls_pair(self) -> HopchainConfig:
        if (self.dlq_tls_certfile is None) != (self.dlq_tls_keyfile is None):
            msg = "HOPCHAIN_DLQ_TLS_CERTFILE and HOPCHAIN_DLQ_TLS_KEYFILE go together: set both"
            raise ConfigurationError(msg)
        return self

    # -- derived values ------------------------------------------------------------------------

    def keyring(self) -> Keyring | None:
        """The keyring from ``hmac_keys``, or None when no keys are configured."""
        if self.hmac_keys is None:
            return None
        return Keyring(parse_hmac_keys(self.hmac_keys.get_secret_value()))

    def resolution_key(self) -> bytes | None:
        """The key resolutions are signed with, or None when none is configured."""
        if self.dlq_resolution_key is None:
            return None
        return base64.b64decode(self.dlq_resolution_key.get_secret_value().strip())

    @property
    def effective_pattern(self) -> str | None:
        """The pattern to match dead-letter topics with, including the default."""
        if self.dlq_topic_pattern is not None:
            return self.dlq_topic_pattern
        if self.contracts is None and not self.dlq_topics:
            return DEFAULT_TOPIC_PATTERN
        return None

    def _sasl(self) -> tuple[str, str, str]:
        protocol = self.kafka_security_protocol
        if self.kafka_sasl_mechanism is None:
            raise ConfigurationError(
                f"HOPCHAIN_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                "HOPCHAIN_KAFKA_SASL_MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            )
        if not self.kafka_sasl_username or self.kafka_sasl_password is None:
            raise ConfigurationError(
                f"HOPCHAIN_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                "HOPCHAIN_KAFKA_SASL_USERNAME and HOPCHAIN_KAFKA_SASL_PASSWORD"
            )
        password = self.kafka_sasl_password.get_secret_value()
        return self.kafka_sasl_mechanism, self.kafka_sasl_username, password

    def client_kwargs(self) -> dict[str, Any]:
        """Login keyword arguments for aiokafka's producer, consumer and admin client.

        Raises:
            ConfigurationError: a SASL protocol without a mechanism, user name or password.
        """
        protocol = self.kafka_security_protocol
        kwargs: dict[str, Any] = {"security_protocol": protocol}
        if protocol in {"SSL", "SASL_SSL"}:
            kwargs["ssl_context"] = ssl.create_default_context()
        if protocol.startswith("SASL_"):
            mechanism, username, password = self._sasl()
            kwargs.update(
                sasl_mechanism=mechanism,
                sasl_plain_username=username,
                sasl_plain_password=password,
            )
        return kwargs

    def connection_kwargs(self, client: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Where and how an aiokafka client of hopchain's connects, beside ``client``.

        ``client``: the aiokafka keyword arguments of the client or broker hopchain wraps
        (``bootstrap_servers`` and its login). The servers come from ``kafka_bootstrap`` when
        it was given (as an argument or HOPCHAIN_KAFKA_BOOTSTRAP), else from ``client``; the
        login from the security settings when any of them was given, else from ``client``.
        With no ``client``, both come from this configuration (defaults included).

        Raises:
            ConfigurationError: a SASL protocol without a mechanism, user name or password.
        """
        given = self.model_fields_set
        wrapped = dict(client or {})
        servers = wrapped.get("bootstrap_servers")
        if "kafka_bootstrap" in given or not servers:
            servers = self.kafka_bootstrap
        elif not isinstance(servers, str):
            servers = ",".join(str(server) for server in servers)
        if client is None or given & _SECURITY_FIELDS:
            login = self.client_kwargs()
        else:
            login = {name: value for name, value in wrapped.items() if name in LOGIN_ARGUMENTS}
        return {"bootstrap_servers": servers, **login}
