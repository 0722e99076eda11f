"""JSON Schema (draft 2020-12) export, so services in other languages validate the same contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hopchain.schemas.contracts import ContractRegistry
from hopchain.schemas.envelope import SCHEMA_VERSION, Envelope

__all__ = ["DIALECT", "envelope_schema", "export_schemas", "topic_schema"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _document(schema: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    return {"$schema": DIALECT, **schema, "title": title, "description": description}


def envelope_schema() -> dict[str, Any]:
    """Schema of the envelope as it travels in headers mode (no payload)."""
    return _document(
        Envelope.model_json_schema(mode="serialization"),
        "hopchain envelope",
        f"hopchain envelope, schema {SCHEMA_VERSION} (headers mode: the hopchain-envelope "
        "header). Hop digests are SHA-256 over each hop's canonical JSON; see the README.",
    )


def topic_schema(registry: ContractRegistry, topic: str) -> dict[str, Any]:
    """Schema of a topic's record value: the payload (headers mode) or envelope+payload (body)."""
    contract = registry.get(topic)
    model = contract.model if contract.mode == "headers" else contract.body_model
    return _document(
        model.model_json_schema(mode="serialization"),
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
