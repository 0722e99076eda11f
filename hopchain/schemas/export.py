r"""JSON Schema (draft 2020-12) export, so services in other languages validate the same contract.

The schema of schema 2 is exactly as strict as the reader's checks of structure (``SPEC.md``
section 8 lists what it leaves to the reader): every member required, no other allowed, the
reader's patterns, lengths and ranges, at most ``max_hops`` hops (the reader's
:class:`~hopchain.schemas.codec.Limits`), ``legacy`` as null or a schema-1 envelope, no lone
surrogate (``\ud800`` without its pair) in any string, and payloads as the topic's contract
reads them (strict, unless the contract opts out with ``lax_payloads``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from hopchain.schemas.codec import Limits
from hopchain.schemas.contracts import ContractRegistry, TopicContract
from hopchain.schemas.envelope import SCHEMA_VERSION, Envelope
from hopchain.schemas.wire import (
    COMPONENT_PATTERN,
    DIGEST_PATTERN,
    ENVELOPE_ID_PATTERN,
    MAX_INT,
    NAME_PATTERN,
    SCHEMA_VERSION_PATTERN,
    SIGNATURE_PATTERN,
    SPAN_ID_PATTERN,
    TIMESTAMP_PATTERN,
    TOPIC_PATTERN,
    TRACE_ID_PATTERN,
    EnvelopeDocument,
)

__all__ = [
    "DIALECT",
    "LAX_PAYLOADS_COMMENT",
    "MAX_HOPS",
    "envelope_schema",
    "export_schemas",
    "topic_schema",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
MAX_HOPS = Limits().max_hops
"""The reader's default hop limit, and so the exported schema's ``maxItems``."""
LAX_PAYLOADS_COMMENT = (
    "lax payloads: this topic's reader reads payloads as its model is configured, in "
    'pydantic\'s lax mode unless the model is strict ("1000" and true read as integers, 1.0 '
    "as 1); this schema is the strict form a writer sends, and the reader also accepts what "
    "lax mode converts"
)
"""The ``$comment`` of a topic schema whose contract sets ``lax_payloads``."""

_END = r"(?!\n)$"
_NO_SURROGATE = r"^[^\ud800-\udfff]*" + _END
"""Text that is Unicode: no lone surrogate (which RFC 8785 text, being UTF-8, cannot hold)."""
_SURROGATE = r"[\ud800-\udfff]"
_NAME = NAME_PATTERN.replace(r"\x7f]", r"\x7f\ud800-\udfff]")
_LEGACY_VERSION = r"^1\.[0-9]{1,4}" + _END
_ASCII_ONLY = frozenset(
    {
        COMPONENT_PATTERN,
        DIGEST_PATTERN,
        ENVELOPE_ID_PATTERN,
        SCHEMA_VERSION_PATTERN,
        SIGNATURE_PATTERN,
        SPAN_ID_PATTERN,
        TIMESTAMP_PATTERN,
        TOPIC_PATTERN,
        TRACE_ID_PATTERN,
        _LEGACY_VERSION,
    }
)
"""The envelope's patterns that admit ASCII only, so no surrogate either."""


def _document(schema: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    return {"$schema": DIALECT, **schema, "title": title, "description": description}


def _walk(node: Any, visit: Any) -> None:
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            _walk(value, visit)
    elif isinstance(node, list):
        for value in node:
            _walk(value, visit)


def _unicode_only(node: dict[str, Any]) -> None:
    """Every string, and every member name an object may add, free of lone surrogates.

    The reader refuses them (``not_canonical`` in the envelope, ``bad_json`` in a payload);
    JSON parsers in ECMAScript and Python accept them, so the schema has to say it.
    """
    kinds = node.get("type")
    text = kinds == "string" or (isinstance(kinds, list) and "string" in kinds)
    if text and "enum" not in node and "const" not in node:
        pattern = node.get("pattern")
        if pattern is None:
            node["pattern"] = _NO_SURROGATE
        elif pattern == NAME_PATTERN:
            node["pattern"] = _NAME
        elif pattern not in _ASCII_ONLY:
            node.setdefault("allOf", []).append({"not": {"pattern": _SURROGATE}})
    if kinds == "object" and node.get("additionalProperties", True) is not False:
        node.setdefault("propertyNames", {"pattern": _NO_SURROGATE})


def _legacy_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """Schema 1's envelope as ``legacy`` holds it, as the reader checks it; and its ``$defs``.

    Read with schema 1's models (:class:`~hopchain.schemas.envelope.Envelope`): members
    with a default may be left out, and unknown members are kept (a newer minor version's).
    The models' patterns are made to mean what the reader's do: ``$`` matches only at the end,
    timestamps are the one spelling of days the calendar has, ids are not all zero, numbers
    stay within 2^53 - 1 (``SPEC.md`` section 2), and the version is 1.x.
    """
    schema = Envelope.model_json_schema(mode="validation", ref_template="#/$defs/Legacy{model}")
    definitions = {f"Legacy{name}": value for name, value in schema.pop("$defs").items()}
    envelope = schema
    envelope["properties"]["schema_version"]["pattern"] = _LEGACY_VERSION
    envelope["properties"]["trace_id"]["pattern"] = TRACE_ID_PATTERN

    def visit(node: dict[str, Any]) -> None:
        if node.get("format") == "date-time":
            del node["format"]
            node["pattern"] = TIMESTAMP_PATTERN
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.endswith("$") and not pattern.endswith(_END):
            node["pattern"] = pattern[:-1] + _END
        if node.get("pattern") == SPAN_ID_PATTERN.replace("(?!0{16})", ""):
            node["pattern"] = SPAN_ID_PATTERN
        if node.get("type") == "integer":
            node["maximum"] = min(node.get("maximum", MAX_INT), MAX_INT)

    _walk(envelope, visit)
    _walk(definitions, visit)
    return envelope, definitions


def _v2_document(payload: dict[str, Any] | None, max_hops: int) -> dict[str, Any]:
    schema = msgspec.json.schema(EnvelopeDocument)
    definitions: dict[str, Any] = schema["$defs"]
    document = definitions.pop("EnvelopeDocument")
    legacy, legacy_definitions = _legacy_schema()
    definitions.update(legacy_definitions, LegacyEnvelope=legacy)
    # null, or the schema-1 envelope this chain continues (SPEC.md section 6).
    document["properties"]["legacy"] = {
        "anyOf": [{"type": "null"}, {"$ref": "#/$defs/LegacyEnvelope"}]
    }
    for name in ("chain", "digests", "signatures"):
        document["properties"][name].update(minItems=1, maxItems=max_hops)
    if payload is not None:
        inner = payload.pop("$defs", {})
        definitions.update(inner)
        document["properties"]["payload"] = payload
        document["required"].append("payload")
    result = {"$defs": definitions, **document}
    _walk(result, _unicode_only)
    return result


def payload_schema(contract: TopicContract) -> dict[str, Any]:
    """The JSON Schema of a contract's payload, as its reader validates it.

    The model's schema in validation mode (a member with a default may be left out), strings
    free of lone surrogates. Strict by default, as the reader is; for a contract with
    ``lax_payloads`` the schema stays the strict form and says (``$comment``) that the reader
    also accepts what lax mode converts.
    """
    document = contract.model.model_json_schema(mode="validation")
    _walk(document, _unicode_only)
    if contract.lax_payloads:
        document["$comment"] = LAX_PAYLOADS_COMMENT
    return document


def envelope_schema(schema: int = 2, *, max_hops: int = MAX_HOPS) -> dict[str, Any]:
    """Schema of the envelope as it travels in headers mode (no payload).

    ``schema`` 2 (what hopchain writes): the envelope text of ``SPEC.md`` read as a JSON
    document, exactly as strict as the reader's checks of its structure (every member
    required, no other allowed, the reader's patterns, at most ``max_hops`` hops: the
    reader's ``Limits.max_hops``); 1: schema 1's envelope JSON.
    """
    if schema == 2:  # noqa: PLR2004
        return _document(
            _v2_document(None, max_hops),
            "hopchain envelope",
            "hopchain envelope, schema 2 (headers mode: the hopchain-envelope header). Hops "
            "are RFC 8785 canonical JSON; canonical form, duplicate members, digests, "
            "signatures, the last hop's destination, contract and payload digest, traceparent "
            "and headers are checked by the reader, not by this schema: see SPEC.md.",
        )
    return _document(
        Envelope.model_json_schema(mode="serialization"),
        "hopchain envelope",
        f"hopchain envelope, schema {SCHEMA_VERSION} (headers mode: the hopchain-envelope "
        "header). Hop digests are SHA-256 over each hop's canonical JSON; see the README.",
    )


def topic_schema(
    registry: ContractRegistry, topic: str, schema: int = 2, *, max_hops: int = MAX_HOPS
) -> dict[str, Any]:
    """Schema of a topic's record value: the payload (headers mode) or envelope+payload (body).

    ``schema``: the envelope schema of body-mode values (see :func:`envelope_schema`);
    ``max_hops``: the reader's hop limit.
    """
    contract = registry.get(topic)
    if contract.mode == "headers":
        document = payload_schema(contract)
    elif schema == 2:  # noqa: PLR2004
        document = _v2_document(payload_schema(contract), max_hops)
        comment = document["properties"]["payload"].pop("$comment", None)
        if comment is not None:
            document["$comment"] = comment
    else:
        document = contract.body_model.model_json_schema(mode="serialization")
    lax = " Payloads are read in lax mode: see $comment." if contract.lax_payloads else ""
    return _document(
        document,
        f"{contract.name} v{contract.version}",
        f"Record value of topic {contract.topic!r} ({contract.mode.value} mode), "
        f"owner {contract.owner!r}, dead letters in {contract.dead_letter_topic!r}.{lax}",
    )


def export_schemas(
    registry: ContractRegistry, directory: Path, *, max_hops: int = MAX_HOPS
) -> list[Path]:
    """Write the envelope's schema and every registered topic's; return the files written.

    ``max_hops``: the hop limit of the readers the schemas describe (``Limits.max_hops``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    documents = {"envelope.schema.json": envelope_schema(max_hops=max_hops)}
    for contract in registry:
        name = f"{contract.topic}.v{contract.version}.schema.json"
        documents[name] = topic_schema(registry, contract.topic, max_hops=max_hops)
    written = []
    for name, document in sorted(documents.items()):
        path = directory / name
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written
