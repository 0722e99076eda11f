"""Topic contracts: which payload model, wire mode, owner and dead-letter topic each topic has."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from hopchain.exceptions import ConfigurationError, DecodeError, ReasonCode, UnknownTopicError
from hopchain.schemas.envelope import BodyEnvelope
from hopchain.schemas.refusals import from_validation, refuse_non_finite
from hopchain.schemas.wire import NAME_PATTERN, TOPIC_PATTERN

if TYPE_CHECKING:
    # Not at run time: importing hopchain loads no schema-registry client (an extra).
    from hopchain.formats.registry import RegistryFormat

__all__ = [
    "BARE_RECORD_HINT",
    "DEAD_LETTER_SUFFIX",
    "ContractRegistry",
    "TopicContract",
    "WireMode",
]

DEAD_LETTER_SUFFIX = ".dlq"
BARE_RECORD_HINT = (
    "if its producer has not adopted hopchain, TopicContract(..., adopt_bare=True) admits "
    "such records with a marked origin"
)
"""The fix a ``missing_header`` refusal suggests: plain records are most often a producer's
that does not use hopchain yet, and ``adopt_bare`` is the contract option that admits them."""
_TOPIC_NAME = re.compile(TOPIC_PATTERN)
_NAME = re.compile(NAME_PATTERN)
_NAME_LENGTH = 200
"""A contract's name is a SPEC *name*: carried in every envelope, 1-200 characters."""


class WireMode(StrEnum):
    """How the envelope travels with a record."""

    HEADERS = "headers"
    """The value is the untouched payload; the envelope travels in Kafka headers.

    A consumer that has not adopted hopchain still reads the payload as before."""
    BODY = "body"
    """The value is the envelope as JSON with the payload inside, for sinks that drop headers."""


@dataclass(frozen=True)
class TopicContract:
    """The contract of one topic.

    Attributes:
        topic: the Kafka topic.
        model: the pydantic model every payload on the topic must satisfy.
        owner: who is paged for this topic's dead letters (a team or rota name).
        name: the contract's name, carried in every envelope; defaults to the topic.
        version: the contract's major version; bump it for incompatible payload changes.
        mode: how the envelope travels.
        dead_letter_topic: where rejected and abandoned records are parked;
            defaults to ``<topic>.dlq``.
        adopt_bare: admit records without an envelope whose payload satisfies the contract
            (from producers that have not adopted hopchain); the consumer writes their
            origin hop. Headers mode only. Off by default: strict.
        report_only: validate everything but park nothing: what would be parked is
            counted (``hopchain_would_reject_total``), logged and traced, then handed to
            the handler as if hopchain were not there. For rolling hopchain out.
        writers: the components allowed to write the topic (schema 2: a record whose last
            hop names another is refused as ``unexpected_writer``); empty: any component.
        lax_payloads: read payloads as the model's own configuration says, which for most
            models is pydantic's lax mode: it converts (``"1000"`` and ``true`` pass as
            integers, ``1.0`` as 1) where the default, strict JSON mode refuses anything but
            the JSON type the model declares, as the exported JSON Schema says. An explicit
            opt-out for one topic while its producers are fixed; its exported schema then
            says that its reader is laxer than the schema.
        payload_format: ``None`` for JSON read by ``model`` (the default); a
            :class:`~hopchain.formats.RegistryFormat` (``AvroFormat(schema=...)``) for values in
            Confluent's schema-registry wire format, decoded with its reader schema and then
            validated by ``model`` (:class:`~hopchain.formats.Record` takes the decoded
            record as it is). Headers mode only: the value stays the framed bytes.
    """

    topic: str
    model: type[BaseModel]
    owner: str
    name: str = ""
    version: int = 1
    mode: WireMode = WireMode.HEADERS
    dead_letter_topic: str = ""
    description: str = field(default="", compare=False)
    adopt_bare: bool = False
    report_only: bool = False
    writers: frozenset[str] = frozenset()
    lax_payloads: bool = False
    payload_format: RegistryFormat | None = None

    def __post_init__(self) -> None:
        for label, value in (("topic", self.topic), ("dead_letter_topic", self.dead_letter_topic)):
            if value and not _TOPIC_NAME.match(value):
                raise ConfigurationError(
                    f"{label} {value!r} is not a valid Kafka topic name "
                    "(1-249 of letters, digits, '.', '_', '-')"
                )
        if not self.owner:
            raise ConfigurationError(
                f"topic {self.topic!r} needs an owner: someone must be paged for its dead letters"
            )
        if self.version < 1:
            raise ConfigurationError(f"contract version for {self.topic!r} must be 1 or more")
        if self.adopt_bare and self.mode is not WireMode.HEADERS:
            raise ConfigurationError(
                f"topic {self.topic!r} adopts bare records, which needs mode=WireMode.HEADERS: "
                "in body mode a record without an envelope has no payload to read"
            )
        if self.payload_format is not None and self.mode is not WireMode.HEADERS:
            raise ConfigurationError(
                f"topic {self.topic!r} carries {self.payload_format.kind} payloads, which travel "
                "in headers mode only (the value stays the framed bytes): use WireMode.HEADERS"
            )
        object.__setattr__(self, "name", self._checked_name())
        if not self.dead_letter_topic:
            object.__setattr__(self, "dead_letter_topic", self._default_dead_letter_topic())
        if self.dead_letter_topic == self.topic:
            raise ConfigurationError(f"topic {self.topic!r} cannot be its own dead-letter topic")

    def _checked_name(self) -> str:
        """The contract's name (the topic when none is given), checked to be a SPEC name."""
        if not self.name and len(self.topic) > _NAME_LENGTH:
            raise ConfigurationError(
                f"topic {self.topic!r} has {len(self.topic)} characters; a contract's name "
                f"is at most {_NAME_LENGTH} and defaults to the topic: give it a name"
            )
        name = self.name or self.topic
        if len(name) > _NAME_LENGTH or not _NAME.match(name):
            raise ConfigurationError(
                f"contract name {name!r} for {self.topic!r} is not a name: "
                f"1-{_NAME_LENGTH} characters, no control characters"
            )
        return name

    def _default_dead_letter_topic(self) -> str:
        dead_letter_topic = self.topic + DEAD_LETTER_SUFFIX
        if not _TOPIC_NAME.match(dead_letter_topic):
            raise ConfigurationError(
                f"topic {self.topic!r} is too long for the default dead-letter topic "
                f"({len(dead_letter_topic)} characters; Kafka allows 249): "
                "give a dead_letter_topic"
            )
        return dead_letter_topic

    @property
    def binary_payload(self) -> bool:
        """Whether the payload is bytes rather than JSON text (a registry payload format).

        Such a value is neither checked to be UTF-8 nor searched for NaN and Infinity.
        """
        return self.payload_format is not None

    def refuse_non_finite(self, value: bytes) -> None:
        """A JSON value: refuse NaN and Infinity (``bad_json``); framed bytes are not text.

        Raises:
            EnvelopeError: ``bad_json`` at ``$.payload`` (headers mode) or ``$`` (body mode).
        """
        if not self.binary_payload:
            refuse_non_finite(value, "$.payload" if self.mode is WireMode.HEADERS else "$")

    def validate_payload(self, raw: bytes) -> BaseModel:
        """Read a payload with the contract's model: strict, unless ``lax_payloads``.

        JSON, or with a registry payload format the record its serde decodes.

        Raises:
            ValidationError: the payload breaks the contract (the caller reports where).
            DecodeError: a registry payload that cannot be decoded (``wrong_magic_byte``,
                ``unknown_schema``, ``unresolvable_schema``, ``undecodable_payload``).
            SchemaRegistryUnavailable: the registry did not answer (transient).
            DecodeError: ``contract_error`` at ``$.payload``: the model itself raised something
                other than a validation error (a validator with a bug); the record is parked
                rather than acknowledged.
        """
        if self.payload_format is not None:
            model = self._validated(self.payload_format.read(self.topic, raw))
            self.payload_format.remember(raw, model)
            return model
        try:
            # Lax: as the model's own configuration says (pydantic's default is lax).
            return self.model.model_validate_json(raw, strict=None if self.lax_payloads else True)
        except ValidationError:
            raise
        except Exception as exc:
            raise self._contract_error(exc) from exc

    def _validated(self, data: Any) -> BaseModel:
        """A registry payload's decoded record (or a dictionary to write) read by the model.

        Raises:
            ValidationError: it breaks the contract.
            DecodeError: ``contract_error``: the model raised something else.
        """
        try:
            return self.model.model_validate(data, strict=None if self.lax_payloads else True)
        except ValidationError:
            raise
        except Exception as exc:
            raise self._contract_error(exc) from exc

    def _contract_error(self, exc: Exception) -> DecodeError:
        return DecodeError(
            ReasonCode.CONTRACT_ERROR,
            f"the model {self.model.__name__} of contract {self.name!r} raised "
            f"{type(exc).__name__} while validating the payload: a bug in one of its "
            "validators; fix the model and redrive the record",
            "$.payload",
            topic=self.topic,
        )

    def holds(self, raw: bytes, payload: BaseModel) -> bool:
        """A registry payload format: whether the framed bytes ``raw`` read as ``payload``.

        A payload written on as it was read is written as the bytes read, whatever schema
        version framed them: consumers downstream read the producer's bytes unchanged.
        """
        if self.payload_format is None:
            return False
        known = self.payload_format.recall(raw)
        if known is not None:
            return known is payload or bool(known == payload)
        try:
            return bool(self.validate_payload(raw) == payload)
        except (ValidationError, DecodeError):
            return False

    def framed_payload(
        self,
        payload: BaseModel,
        reads: Iterable[tuple[type[BaseModel], bool, bytes, str] | None],
    ) -> tuple[bytes, str | None]:
        """A registry payload to write, framed, with its digest if known.

        The framed bytes it was read from (one of ``reads``: model, strictness, bytes,
        digest), with their digest; else encoded anew, without.

        Raises:
            EnvelopeError: as :meth:`write_payload`, validation errors at ``$.payload...``.
            SchemaRegistryUnavailable: the registry did not answer (transient).
        """
        checked: set[bytes] = set()
        for known in reads:
            if (
                known is not None
                and known[0] is self.model
                and known[1] == self.lax_payloads
                and known[2] not in checked  # the record's read is often also the last one
            ):
                checked.add(known[2])
                if self.holds(known[2], payload):
                    return known[2], known[3]
        try:
            return self.write_payload(payload), None
        except ValidationError as exc:
            raise from_validation(exc, prefix=("payload",)) from None

    def write_payload(self, payload: BaseModel) -> bytes:
        """A registry payload format: the payload framed with the contract's schema.

        Nothing is sent that its readers would refuse. The payload's dictionary is read by
        the contract's model first (a payload changed after validation or built with
        ``model_construct()`` is refused at its field's path), the serializer refuses what the
        schema cannot carry (a value of another type, a field the schema does not have), and
        the framed bytes are read back by the model as its readers will read them: a value the
        schema writes as another type than the model reads (an ``int`` field for an Avro
        ``double``) is refused before it is sent, not parked by every reader. Avro reads back
        with the contract's own schema, which wrote the bytes, so no registry look-up is made.

        Raises:
            ValidationError: the payload, or the payload read back, breaks the contract.
            DecodeError: ``unknown_schema`` (not registered, and no auto-registration),
                ``payload_invalid`` (it does not fit the schema) or ``contract_error``.
            SchemaRegistryUnavailable: the registry did not answer (transient).
        """
        if self.payload_format is None:
            raise TypeError(f"topic {self.topic!r} carries JSON payloads")
        # No serializer warnings: a wrong value is refused, typed, by the model just below.
        data = payload.model_dump(mode="python", warnings=False)
        self._validated(data)
        framed = self.payload_format.write(self.topic, data)
        self._validated(self.payload_format.read_written(self.topic, framed))
        return framed

    @cached_property
    def body_model(self) -> type[BodyEnvelope[Any]]:
        """The body-mode envelope model specialised to this contract's payload."""
        return BodyEnvelope[self.model]  # type: ignore[name-defined]


class ContractRegistry:
    """Maps topics to their contracts. A topic without a contract cannot be used."""

    def __init__(self, contracts: Iterable[TopicContract] = ()) -> None:
        self._by_topic: dict[str, TopicContract] = {}
        self._dead_letter_owners: dict[str, str] = {}
        for contract in contracts:
            self.register(contract)

    def register(self, contract: TopicContract) -> TopicContract:
        """Add a contract; registering a second, different contract for a topic is an error."""
        existing = self._by_topic.get(contract.topic)
        if existing is not None and existing != contract:
            raise ConfigurationError(
                f"topic {contract.topic!r} already has contract {existing.name!r} "
                f"v{existing.version}; a topic has exactly one contract"
            )
        if contract.topic in self._dead_letter_owners:
            raise ConfigurationError(
                f"topic {contract.topic!r} is a dead-letter topic; it cannot carry a contract"
            )
        if contract.dead_letter_topic in self._by_topic:
            raise ConfigurationError(
                f"topic {contract.topic!r} would park its dead letters in "
                f"{contract.dead_letter_topic!r}, which carries a contract of its own; "
                "name another dead_letter_topic"
            )
        owner = self._dead_letter_owners.get(contract.dead_letter_topic, contract.owner)
        if owner != contract.owner:
            raise ConfigurationError(
                f"dead-letter topic {contract.dead_letter_topic!r} is owned by {owner!r}; "
                f"topic {contract.topic!r} (owner {contract.owner!r}) cannot share it, or "
                f"{contract.owner!r} would never be paged: name another dead_letter_topic"
            )
        self._by_topic[contract.topic] = contract
        self._dead_letter_owners[contract.dead_letter_topic] = contract.owner
        return contract

    def get(self, topic: str) -> TopicContract:
        """The topic's contract.

        Raises:
            UnknownTopicError: the topic has no contract; the message says how to add one.
        """
        try:
            return self._by_topic[topic]
        except KeyError:
            raise UnknownTopicError(topic, list(self._by_topic)) from None

    def require(self, topics: Iterable[str]) -> None:
        """Check at start-up that every topic has a contract, naming the first that has not."""
        for topic in topics:
            if topic not in self._by_topic and topic not in self._dead_letter_owners:
                raise UnknownTopicError(topic, list(self._by_topic))

    def is_dead_letter_topic(self, topic: str) -> bool:
        """Whether the topic is some contract's dead-letter topic."""
        return topic in self._dead_letter_owners

    def dead_letter_topics(self) -> dict[str, str]:
        """Every dead-letter topic with the owner paged for it."""
        return dict(self._dead_letter_owners)

    def __iter__(self) -> Iterator[TopicContract]:
        return iter(self._by_topic.values())

    def __len__(self) -> int:
        return len(self._by_topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self._by_topic
