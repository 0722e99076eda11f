"""The exported JSON Schema, checked by an independent validator as a non-Python service would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from pydantic import BaseModel
from strategies import (
    BODY_TOPIC,
    HEADERS_TOPIC,
    TOPICS,
    Sample,
    envelope_bytes,
    envelopes,
    example_envelope,
    payloads,
    sample_codec,
    sample_payload,
    sample_registry,
)
from wire_support import v2_record

from hopchain.schemas import (
    ContractRegistry,
    Envelope,
    Limits,
    TopicContract,
    WireMode,
    envelope_schema,
    export_schemas,
    topic_schema,
)
from hopchain.schemas.export import DIALECT, LAX_PAYLOADS_COMMENT


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


# Schema 1's export, against what the schema-1 codec of these helpers writes (schema 2's
# export is checked against every test vector in test_vectors.py, and below).
ENVELOPE = validator(envelope_schema(schema=1))
TOPIC = {topic: validator(topic_schema(sample_registry(), topic, schema=1)) for topic in TOPICS}
ENVELOPE_V2 = validator(envelope_schema())
TOPIC_V2 = {topic: validator(topic_schema(sample_registry(), topic)) for topic in TOPICS}


def errors(checker: Draft202012Validator, document: object) -> list[str]:
    """Every message, including those under ``anyOf`` (an optional field's alternatives)."""
    found: list[str] = []
    pending = list(checker.iter_errors(document))
    while pending:
        error = pending.pop()
        found.append(error.message)
        pending.extend(error.context or [])
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope=envelopes(), payload=payloads, topic=st.sampled_from(TOPICS))
def test_what_the_library_writes_is_valid_against_the_exported_schemas(
    envelope: Envelope, payload: Sample, topic: str
) -> None:
    record = sample_codec().encode(topic, envelope, payload)

    assert errors(TOPIC[topic], json.loads(record.value)) == []
    assert errors(ENVELOPE, json.loads(envelope_bytes(record))) == []


def envelope_document() -> dict[str, Any]:
    record = sample_codec().encode(HEADERS_TOPIC, example_envelope(), sample_payload())
    document: dict[str, Any] = json.loads(envelope_bytes(record))
    return document


def body_document() -> dict[str, Any]:
    record = sample_codec().encode(BODY_TOPIC, example_envelope(), sample_payload())
    document: dict[str, Any] = json.loads(record.value)
    return document


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda doc: doc["chain"][1].__setitem__("decision", "ignored"), "'ignored' is not one of"),
        (lambda doc: doc["chain"][1]["failure"].__setitem__("error_type", "flaky"), "'flaky'"),
        (lambda doc: doc["chain"][0].pop("component"), "'component' is a required property"),
        (lambda doc: doc.pop("trace_id"), "'trace_id' is a required property"),
        (lambda doc: doc["chain"][0].__setitem__("seq", "0"), "'0' is not of type 'integer'"),
        (lambda doc: doc.__setitem__("head", "not-a-digest"), "does not match"),
        (
            lambda doc: doc["chain"][1]["failure"].__setitem__("description", "x" * 2001),
            "is too long",
        ),
    ],
)
@pytest.mark.parametrize("where", ["envelope", "body"])
def test_known_bad_envelopes_are_refused_by_the_exported_schemas(
    edit: Any, expected: str, where: str
) -> None:
    document = envelope_document() if where == "envelope" else body_document()
    checker = ENVELOPE if where == "envelope" else TOPIC[BODY_TOPIC]

    edit(document)

    assert any(expected in message for message in errors(checker, document)), errors(
        checker, document
    )


def test_a_body_record_without_its_payload_or_with_a_bad_one_is_refused() -> None:
    document = body_document()
    document["payload"]["count"] = "three"
    assert errors(TOPIC[BODY_TOPIC], document)
    del document["payload"]
    assert "'payload' is a required property" in errors(TOPIC[BODY_TOPIC], document)


@pytest.mark.parametrize("topic", TOPICS)
def test_what_a_schema_2_writer_writes_is_valid_against_the_exported_schemas(topic: str) -> None:
    record = v2_record(topic, stages=2)
    document = json.loads(envelope_bytes(record))

    assert errors(TOPIC_V2[topic], json.loads(record.value)) == []
    assert errors(ENVELOPE_V2, document) == [] or topic == BODY_TOPIC
    document["chain"][0]["seq"] = 0
    assert "Additional properties are not allowed ('seq' was unexpected)" in errors(
        TOPIC_V2[topic] if topic == BODY_TOPIC else ENVELOPE_V2, document
    )


def test_a_headers_mode_topic_schema_is_the_payload_alone() -> None:
    assert errors(TOPIC[HEADERS_TOPIC], sample_payload().model_dump(mode="json")) == []
    assert errors(TOPIC[HEADERS_TOPIC], {"sample_id": "s"})


def test_export_writes_the_envelope_and_one_schema_per_topic(tmp_path: Path) -> None:
    written = export_schemas(sample_registry(), tmp_path / "schemas")

    assert [path.name for path in written] == [
        "envelope.schema.json",
        "samples.body.v1.schema.json",
        "samples.v1.schema.json",
    ]
    for path in written:
        document = json.loads(path.read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(document)
        assert document["$schema"] == DIALECT
    body = json.loads((tmp_path / "schemas" / "samples.body.v1.schema.json").read_text())
    assert "team-samples" in body["description"]
    assert "samples.body.dlq" in body["description"]
    # Writing again gives the same bytes: the files can be committed and diffed.
    before = [path.read_bytes() for path in written]
    assert [
        path.read_bytes() for path in export_schemas(sample_registry(), tmp_path / "schemas")
    ] == before


def test_the_hop_limit_is_the_readers_and_a_parameter() -> None:
    default = envelope_schema()["properties"]
    three = envelope_schema(max_hops=3)["properties"]
    body = topic_schema(sample_registry(), BODY_TOPIC, max_hops=3)["properties"]

    for name in ("chain", "digests", "signatures"):
        assert (default[name]["minItems"], default[name]["maxItems"]) == (1, Limits().max_hops)
        assert three[name]["maxItems"] == body[name]["maxItems"] == 3
    document = json.loads(envelope_bytes(v2_record(HEADERS_TOPIC, stages=3)))
    assert errors(validator(envelope_schema(max_hops=4)), document) == []
    assert any("is too long" in e for e in errors(validator(envelope_schema(max_hops=3)), document))


def test_legacy_is_null_or_a_schema_1_envelope_as_the_reader_reads_it() -> None:
    checker = validator(envelope_schema())
    document = json.loads(envelope_bytes(v2_record(HEADERS_TOPIC, stages=1)))
    schema_1 = json.loads(
        envelope_bytes(sample_codec().encode(HEADERS_TOPIC, example_envelope(), sample_payload()))
    )

    def verdict(legacy: object) -> list[str]:
        return errors(checker, {**document, "legacy": legacy})

    assert verdict(None) == []
    assert verdict(schema_1) == []
    assert verdict({**schema_1, "added_in_1_1": True}) == []  # a newer minor's member is kept
    assert verdict({k: v for k, v in schema_1.items() if k != "chain"}) == []  # a default
    assert verdict({}) != []
    assert verdict([schema_1]) != []
    assert verdict({**schema_1, "schema_version": "2.0"}) != []
    assert verdict({**schema_1, "schema_version": "1.0\n"}) != []
    assert verdict({**schema_1, "trace_id": "0" * 32}) != []
    assert verdict({**schema_1, "contract_version": 2**53}) != []
    hop = {**schema_1["chain"][0], "decided_at": "2023-02-29T00:00:00Z"}
    assert verdict({**schema_1, "chain": [hop]}) != []


def test_no_string_of_the_envelope_or_the_payload_may_hold_a_lone_surrogate() -> None:
    checker = validator(envelope_schema())
    document = json.loads(envelope_bytes(v2_record(HEADERS_TOPIC, stages=1)))
    payload = sample_payload().model_dump(mode="json")

    assert errors(checker, {**document, "run_id": "run \U0001f4dd"}) == []
    assert errors(checker, {**document, "run_id": "run \ud800"}) != []
    document["chain"][0]["observation"] = "\udc00"
    assert errors(checker, document) != []
    assert errors(TOPIC_V2[HEADERS_TOPIC], {**payload, "sample_id": "\ud800"}) != []
    assert errors(TOPIC_V2[HEADERS_TOPIC], {**payload, "sample_id": "\U0001f4dd"}) == []


class Lenient(BaseModel):
    number: int
    note: str = ""


def test_a_lax_contracts_schema_is_the_strict_form_and_says_its_reader_is_laxer() -> None:
    registry = ContractRegistry(
        [
            TopicContract(topic="strict", model=Lenient, owner="o"),
            TopicContract(topic="lax", model=Lenient, owner="o", lax_payloads=True),
            TopicContract(
                topic="lax.body", model=Lenient, owner="o", mode=WireMode.BODY, lax_payloads=True
            ),
        ]
    )
    strict, lax = topic_schema(registry, "strict"), topic_schema(registry, "lax")
    body = topic_schema(registry, "lax.body")

    assert "$comment" not in strict
    assert lax["$comment"] == body["$comment"] == LAX_PAYLOADS_COMMENT
    assert "lax mode" in lax["description"]
    assert "$comment" not in body["properties"]["payload"]
    for schema in (strict, lax):
        assert errors(validator(schema), {"number": 1}) == []  # a default may be left out
        assert errors(validator(schema), {"number": "1000"}) != []
    assert errors(validator(body), {"number": 1}) != []  # the envelope is required too
