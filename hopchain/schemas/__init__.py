"""The envelope contract: typed failures, the append-only hop chain, topic contracts, codecs."""

from hopchain.schemas.chain import append_hop, envelope_genesis, new_envelope, verify_chain
from hopchain.schemas.codec import (
    DEGRADED_HEADER,
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
    Decoded,
    EncodedRecord,
    EnvelopeCodec,
    Limits,
    RawHeaders,
)
from hopchain.schemas.contracts import DEAD_LETTER_SUFFIX, ContractRegistry, TopicContract, WireMode
from hopchain.schemas.envelope import SCHEMA_VERSION, BodyEnvelope, Envelope
from hopchain.schemas.export import envelope_schema, export_schemas, topic_schema
from hopchain.schemas.failure import Attempt, Degradation, Effect, Failure, ValidationIssue
from hopchain.schemas.hop import Hop, Position
from hopchain.schemas.ids import new_envelope_id, new_intent_key, stage_intent_key
from hopchain.schemas.integrity import Keyring
from hopchain.schemas.record import ConsumedRecord
from hopchain.schemas.text_v2 import envelope_text, load_envelope
from hopchain.schemas.vocabulary import (
    DEFAULT_ACTIONS,
    VOCABULARY_VERSION,
    AttemptKind,
    AttemptOutcome,
    Decision,
    DefaultAction,
    EffectKind,
    ErrorType,
)
from hopchain.schemas.wire import WIRE_VERSION

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "DEFAULT_ACTIONS",
    "DEGRADED_HEADER",
    "ENVELOPE_HEADER",
    "SCHEMA_VERSION",
    "TRACEPARENT_HEADER",
    "TRACESTATE_HEADER",
    "VOCABULARY_VERSION",
    "WIRE_VERSION",
    "Attempt",
    "AttemptKind",
    "AttemptOutcome",
    "BodyEnvelope",
    "ConsumedRecord",
    "ContractRegistry",
    "Decision",
    "Decoded",
    "DefaultAction",
    "Degradation",
    "Effect",
    "EffectKind",
    "EncodedRecord",
    "Envelope",
    "EnvelopeCodec",
    "ErrorType",
    "Failure",
    "Hop",
    "Keyring",
    "Limits",
    "Position",
    "RawHeaders",
    "TopicContract",
    "ValidationIssue",
    "WireMode",
    "append_hop",
    "envelope_genesis",
    "envelope_schema",
    "envelope_text",
    "export_schemas",
    "load_envelope",
    "new_envelope",
    "new_envelope_id",
    "new_intent_key",
    "stage_intent_key",
    "topic_schema",
    "verify_chain",
]
