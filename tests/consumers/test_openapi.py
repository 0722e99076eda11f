"""The OpenAPI document of the dead-letter service: served, checked in, true to the service."""

from __future__ import annotations

import json
import re
import secrets
import time
from typing import Any

import pytest
import schemathesis
from aiokafka import AIOKafkaProducer
from api_fuzz import fuzz_api
from dlq_helpers import SettingsFactory, asgi_get, report_figure, settings_factory, wait_until
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from starlette.routing import Route
from test_http_app import app

from hopchain.consumers import DeadLetterService
from hopchain.consumers.api import OPENAPI_DOCUMENT, api_routes
from hopchain.consumers.records import ParkedLetter
from hopchain.consumers.resolutions import RedriveTarget, Resolution
from hopchain.exceptions import ReasonCode
from hopchain.schemas import ErrorType
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import envelope_for, produce_dead_letters, synthetic_dead_letter

DOCUMENT: dict[str, Any] = json.loads(OPENAPI_DOCUMENT.read_text())
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]


async def test_the_service_serves_the_checked_in_document_byte_for_byte() -> None:
    status, body = await asgi_get(app(), "/openapi.json")

    assert status == 200
    assert body == OPENAPI_DOCUMENT.read_bytes()


def test_the_document_is_valid_openapi_with_valid_json_schemas() -> None:
    schemathesis.openapi.from_dict(DOCUMENT).validate()  # the OpenAPI 3.1 meta-schema
    assert DOCUMENT["openapi"].startswith("3.1.")
    for schema in SCHEMAS.values():
        Draft202012Validator.check_schema(schema)


def test_every_json_endpoint_is_documented_and_nothing_else() -> None:
    served = {
        (route.path.replace("{action}", action), method.lower())
        for route in api_routes()
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
        for action in (("redrive", "discard") if "{action}" in route.path else ("",))
    }
    documented = {(path, method) for path, item in DOCUMENT["paths"].items() for method in item}

    assert documented == served


def test_the_vocabularies_and_fields_in_the_document_are_the_services() -> None:
    assert SCHEMAS["ErrorType"]["enum"] == [member.value for member in ErrorType]
    assert SCHEMAS["ReasonCode"]["enum"] == [member.value for member in ReasonCode]
    letter = ParkedLetter("id", "o", "s", "internal", None, 0.0, "t", 0, 0).as_json()
    # Every field documented is one the service writes, and all of them are required; the
    # service may add fields (additional properties are allowed).
    for name, written in (
        ("DeadLetter", {*letter, "resolution"}),
        ("Resolution", set(Resolution.model_fields)),
        ("RedriveTarget", set(RedriveTarget.model_fields)),
    ):
        documented = set(SCHEMAS[name]["properties"])
        assert documented <= written, name
        assert set(SCHEMAS[name]["required"]) == documented, name
        assert SCHEMAS[name].get("additionalProperties", True) is True, name


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


async def park_a_mixture(bootstrap: str, dead_letter_topic: str, source_topic: str) -> int:
    """Dead letters of every error type, with and without envelopes, and unreadable records."""
    now = time.time()
    letters = [
        synthetic_dead_letter(
            owner="team-a",
            source_topic=source_topic,
            error_type=error_type,
            parked_at=now - 60.0 * number,
            envelope=envelope_for(source_topic) if number % 2 else None,
            key=f"order-{number}".encode(),
            source_offset=number,
        )
        for number, error_type in enumerate(list(ErrorType) * 3)
    ]
    await produce_dead_letters(bootstrap, dead_letter_topic, letters)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            dead_letter_topic, b"\xff\xfe binary", headers=[("x", b"\xff")]
        )
        await producer.send_and_wait(dead_letter_topic, None, key=b"tombstone")
        await producer.send_and_wait(
            dead_letter_topic, b"{}", headers=[("hopchain-dlq-id", b"damaged-1")]
        )
    finally:
        await producer.stop()
    return len(letters) + 3


def operations_by_pattern() -> dict[str, str]:
    """Each documented path as a pattern of the paths it serves."""
    return {re.sub(r"\\{[a-z_]+\\}", "[^/]+", re.escape(path)): path for path in DOCUMENT["paths"]}


@pytest.mark.kafka
@pytest.mark.slow
async def test_fuzzing_the_live_service_finds_no_server_error_and_no_undocumented_answer(
    dlq_settings: SettingsFactory,
    kafka_bootstrap: str,
    pytestconfig: pytest.Config,
    record_property: Any,
) -> None:
    # Topics of this test's own: redrives and discards cannot touch another test's records.
    source = unique_topic_name("fuzz-orders")
    dead_letter_topic = f"{source}.dlq"
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={dead_letter_topic: "team-a"}, dlq_token=token)

    async with DeadLetterService(settings) as service:
        await create_topics(kafka_bootstrap, source)
        await service.wait_ready(timeout=60)
        parked = await park_a_mixture(kafka_bootstrap, dead_letter_topic, source)
        await wait_until(lambda: len(service.index) == parked, what="the dead letters indexed")

        report = await fuzz_api(service.url, token, operations_by_pattern())
        resolved = service.index.counts()["resolutions"]

    # (Methods the document does not list are tried too: they answer the JSON 404. The
    # document's own path is not fuzzed: schemathesis loads it from there.)
    documented = {
        f"{method.upper()} {path}"
        for path, item in DOCUMENT["paths"].items()
        for method in item
        if path != "/openapi.json"
    }
    record_property("api_fuzz_requests", report.requests)
    record_property("api_fuzz_server_errors", report.server_errors)
    report_figure(pytestconfig, f"{report.summary(documented)}; {resolved} letters resolved")
    assert report.failures == [], report.output[-20_000:]
    assert report.exit_code == 0, report.output[-20_000:]
    assert report.server_errors == 0
    # Every operation was exercised, the mutating ones included, and some reached a letter.
    assert documented <= set(report.operations)
    assert report.statuses[200] > 0
    assert report.statuses[400] > 0
    assert resolved > 0
