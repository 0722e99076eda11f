"""JSON Schema (draft 2020-12) export, so services in other languages validate the same contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from hopchain.schemas.contracts import ContractRegistry
from hopchain.schemas.envelope import SCHEMA_VERSION, Envelope
from hopchain.schemas.wire import EnvelopeDocument

__all__ = ["DIALECT", "envelope_schema", "export_schemas", "topic_schema"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _document(schema: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    return {"$schema": DIALECT, **schema, "title": title, "description": description}


def _v2_document(payload: dict[str, Any] | None) -> dict[str, Any]:
    schema = msgspec.json.schema(EnvelopeDocument)
    definitions: dict[str, Any] = schema["$defs"]
    document = definitions.pop("EnvelopeDocument")
    # A schema-1 envelope this chain continues, checked by the reader with schema 1's rules.
    definitions.update(_legacy_definitions())
    document["properties"]["legacy"] = {
        "anyOf": [{"type": "null"}, {"$ref": "#/$defs/LegacyEnvelope"}]
    }
    if payload is not None:
        inner = payload.pop("$defs", {})
        definitions.update(inner)
        document["properties"]["payload"] = payload
        document["required"].append("payload")
    return {"$defs": definitions, **document}


def _legacy_definitions() -> dict[str, Any]:
    """Schema 1's envelope (``legacy``), its definitions named ``Legacy...`` to stay apart."""
    schema = Envelope.model_json_schema(mode="serialization")
    inner = schema.pop("$defs", {})
    renamed: dict[str, Any] = json.loads(
        json.dumps({"Envelope": schema, **inner}).replace('"#/$defs/', '"#/$defs/Legacy')
    )
    envelope = renamed["Envelope"]
    envelope["properties"]["schema_version"] = {
        "type": "string",
        "pattern": r"^1\.[0-9]{1,4}(?!\n)$",
    }
    return {f"Legacy{name}": value for name, value in renamed.items()}


def envelope_schema(schema: int = 2) -> dict[str, Any]:
    """Schema of the envelope as it travels in headers mode (no payload).

    ``schema`` 2 (what hopchain writes): the envelope text of ``SPEC.md`` read as a JSON
    document, exactly as strict as the reader's checks of its structure (every member
    required, no other allowed, the reader's patterns); 1: schema 1's envelope JSON.
    """
    if schema == 2:  # noqa: PLR2004
        return _document(
            _v2_document(None),
            "hopchain envelope",
            "hopchain envelope, schema 2 (headers mode: the hopchain-envelope header). Hops "
            "are RFC 8785 canonical JSON; digests, signatures and canonical form are checked "
            "by the reader, not by this schema: see SPEC.md.",
        )
    return _document(
        Envelope.model_json_schema(mode="serialization"),
        "hopchain envelope",
        f"hopchain envelope, schema {SCHEMA_VERSION} (headers mode: the hopchain-envelope "
        "header). Hop digests are SHA-256 over each hop's canonical JSON; see the README.",
    )


def topic_schema(registry: ContractRegistry, topic: str, schema: int = 2) -> dict[str, Any]:
    """Schema of a topic's record value: the payload (headers mode) or envelope+payload (body).

    ``schema``: the envelope schema of body-mode values (see :func:`envelope_schema`).
    """
    contract = registry.get(topic)
    if contract.mode == "headers":
        document = contract.model.model_json_schema(mode="serialization")
    elif schema == 2:  # noqa: PLR2004
        document = _v2_document(contract.model.model_json_schema(mode="serialization"))
    else:
        document = contract.body_model.model_json_schema(mode="serialization")
    return _document(
        document,
        f"{contract.name} v{contract.version}",
        f"Record value of topic {contract.topic!r} ({contract.mode.value} mode), "
        f"owner {contract.owner!r}, dead letters in {contract.dead_letter_topic!r}.",
    )


def export_schemas(registry: ContractRegistry, directory: Path) -> list[Path]:
    """Write the envelope's schema and every registered topic's; return the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    documents = {"envelope.schema.json": envelope_schema()}
    for contract in registry:
        name = f"{contract.topic}.v{contract.version}.schema.json"
        documents[name] = topic_schema(registry, contract.topic)
    written = []
    for name, document in sorted(documents.items()):
        path = directory / name
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written
