"""OpenTelemetry auto-instrumentation in every process of an estate adopting hopchain.

Three processes, each started with ``opentelemetry-instrument`` (which loads
``opentelemetry-instrumentation-aiokafka``) and exporting spans over OTLP/HTTP to a
collector this test runs: the estate's plain aiokafka producer and consumer (no hopchain),
a FastStream service adopting bare orders, and a second wrapped hop. FastStream's own
telemetry middleware is absent, before hopchain's, or after it. On the real broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from middleware_helpers import header, read_topic, record_count
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from hopchain.schemas import ENVELOPE_HEADER
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("otel_estate.py")
INSTRUMENT = Path(sys.executable).with_name("opentelemetry-instrument")
PRODUCER, CONSUMER = 4, 5  # OTLP span kinds


@dataclass(frozen=True)
class Span:
    """One exported span, as the collector received it."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent: str | None
    attributes: dict[str, Any] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


def _service_of(resource: ResourceSpans) -> str:
    names = (str(_value(a.value)) for a in resource.resource.attributes if a.key == "service.name")
    return next(names, "")


def _span(service: str, span: ProtoSpan) -> Span:
    return Span(
        service=service,
        name=span.name,
        kind=span.kind,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent=span.parent_span_id.hex() or None,
        attributes={a.key: _value(a.value) for a in span.attributes},
    )


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver on loopback: it keeps every span it is sent."""

    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = [
            _span(_service_of(resource), span)
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self.lock:
            self.spans.extend(found)

    @contextmanager
    def running(self) -> Iterator[str]:
        """Serve while the block runs; yields the traces endpoint."""
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                collector.receive(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: object) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        finally:
            server.shutdown()
            server.server_close()


@dataclass(frozen=True)
class Topics:
    first: str
    middle: str
    last: str


def _fail_log(log: Path) -> str:
    return log.read_text()[-3000:]


def _load(folder: Path, *names: str) -> dict[str, Any]:
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in names}


async def _start(args: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    with log.open("wb") as stderr:
        return await asyncio.create_subprocess_exec(
            str(INSTRUMENT),
            sys.executable,
            str(SCRIPT),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
        )


async def _ready(process: asyncio.subprocess.Process, log: Path) -> None:
    assert process.stdout is not None
    line = b""
    while line.strip() != b"ready":  # FastStream logs to standard output too
        line = await asyncio.wait_for(process.stdout.readline(), 90)
        assert line, _fail_log(log)


async def _run_estate(
    bootstrap: str, topics: Topics, tmp_path: Path, telemetry: str
) -> tuple[dict[str, Any], list[Span]]:
    """Run the three processes to the end; what each wrote, and every span exported."""
    collector = Collector()
    with collector.running() as endpoint:
        env = {
            **os.environ,
            "HOPCHAIN_KAFKA_BOOTSTRAP": bootstrap,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        env.pop("OTEL_SERVICE_NAME", None)
        hops = [
            ("adopt", topics.first, topics.middle, ["--adopt"]),
            ("check", topics.middle, topics.last, []),
        ]
        services = []
        for name, source, target, extra in hops:
            args = ["service", "--bootstrap", bootstrap, "--input", source]
            args += ["--output", target, "--component", name, "--telemetry", telemetry]
            args += ["--out", str(tmp_path / f"{name}.json"), *extra]
            services.append(await _start(args, env, tmp_path / f"{name}.log"))
        for (name, *_), process in zip(hops, services, strict=True):
            await _ready(process, tmp_path / f"{name}.log")
        args = ["estate", "--bootstrap", bootstrap, "--first", topics.first]
        args += ["--last", topics.last, "--expect", "2", "--out", str(tmp_path / "estate.json")]
        estate = await _start(args, env, tmp_path / "estate.log")
        status = await asyncio.wait_for(estate.wait(), 150)
        assert status == 0, _fail_log(tmp_path / "estate.log")
        for (name, *_), process in zip(hops, services, strict=True):
            assert process.stdin is not None
            process.stdin.close()
            status = await asyncio.wait_for(process.wait(), 60)
            assert status == 0, _fail_log(tmp_path / f"{name}.log")
    return _load(tmp_path, "estate", "adopt", "check"), collector.spans


@pytest.mark.parametrize("telemetry", ["none", "first", "last"])
async def test_one_trace_from_a_plain_producer_through_two_hops_to_a_plain_consumer(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path, telemetry: str
) -> None:
    topics = Topics(
        await new_topic(prefix="orders"),
        await new_topic(prefix="checked"),
        await new_topic(prefix="reports"),
    )
    found, spans = await _run_estate(kafka_bootstrap, topics, tmp_path, telemetry)
    first, middle, last = topics.first, topics.middle, topics.last
    trace_id = found["estate"]["trace_id"]

    # The adopting service's handler saw exactly the valid bare orders.
    assert sorted(h["order_id"] for h in found["adopt"]["handled"]) == ["o-1", "o-2"]
    assert sorted(h["order_id"] for h in found["check"]["handled"]) == ["o-1", "o-2"]
    # The invalid ones are parked as payload_invalid with their paths, nothing else is.
    parked = await read_topic(kafka_bootstrap, f"{first}.dlq")
    paths = {}
    for record in parked:
        info = read_dead_letter_headers(record.headers)
        assert info.reason is not None
        paths[record.key] = (info.reason.value, info.path)
    assert paths == {
        b"order-1": ("payload_invalid", "$.payload.amount_cents"),
        b"order-2": ("payload_invalid", "$.payload"),
        b"order-4": ("payload_invalid", "$.payload.amount_cents"),
    }
    # Zero records parked because of trace headers.
    assert await record_count(kafka_bootstrap, f"{middle}.dlq") == 0
    assert await record_count(kafka_bootstrap, f"{last}.dlq") == 0

    # Exactly one traceparent on every record written: hopchain's forwards name the last
    # hop's span; the dead letters keep the producer's single one, byte for byte.
    for record in [
        *await read_topic(kafka_bootstrap, middle),
        *await read_topic(kafka_bootstrap, last),
    ]:
        parents = [raw for name, raw in record.headers if name == "traceparent"]
        envelope = load_envelope(header(record, ENVELOPE_HEADER) or "")
        assert len(parents) == 1
        assert parents[0].decode().split("-")[1:3] == [trace_id, envelope.chain[-1].span_id]
    for record in parked:
        assert len([1 for name, _ in record.headers if name == "traceparent"]) == 1
    assert all(len(r["traceparents"]) == 1 for r in found["estate"]["received"])

    # Every span about a record is in the request's one trace, in all three processes. The
    # instrumentation's per-poll spans (getmany) are not about one record: it starts them
    # as roots and links them to the records' spans.
    per_record = [s for s in spans if "messaging.batch.message_count" not in s.attributes]
    assert {s.service for s in per_record} == {"legacy-estate", "adopt", "check"}
    assert {s.trace_id for s in per_record} == {trace_id}
    by_id = {s.span_id: s for s in spans}

    # Each hop's span is the child of the previous hop's, from the producer's send span to
    # the plain consumer's receive span.
    for record in await read_topic(kafka_bootstrap, last):
        origin, adopted, checked = (
            hop.span_id for hop in load_envelope(header(record, ENVELOPE_HEADER) or "").chain
        )
        assert by_id[origin].service == "legacy-estate"
        assert (by_id[origin].name, by_id[origin].kind) == (f"{first} send", PRODUCER)
        assert (by_id[adopted].service, by_id[adopted].parent) == ("adopt", origin)
        assert (by_id[checked].service, by_id[checked].parent) == ("check", adopted)
        received = [s for s in spans if s.name == f"{last} receive" and s.parent == checked]
        assert len(received) == 1
        assert received[0].service == "legacy-estate"
        # A producer span for the forward, child of the hop's span.
        [send] = [s for s in spans if s.parent == adopted and s.name == f"send {middle}"]
        assert send.kind == PRODUCER
        assert send.attributes["messaging.system"] == "kafka"
        assert send.attributes["messaging.destination.name"] == middle
        assert send.attributes["messaging.operation.type"] == "send"
    # The instrumentation's own send span of each forward (with the client's attributes) is
    # under hopchain's send span, or under FastStream's publish span when FastStream's
    # telemetry middleware runs inside hopchain's.
    clients = [s for s in spans if s.name == f"{middle} send"]
    assert len(clients) == 2
    for client in clients:
        assert by_id[client.parent or ""].name in {f"send {middle}", f"{middle} publish"}
        for name in ("server.address", "messaging.client.id", "messaging.destination.partition.id"):
            assert name in client.attributes

    # A span for each rejection, in the record's own trace (child of the producer's send
    # span), with a span for its parking under it.
    rejected = [s for s in spans if s.name == f"reject {first}"]
    assert sorted(s.attributes["hopchain.path"] for s in rejected) == [
        "$.payload",
        "$.payload.amount_cents",
        "$.payload.amount_cents",
    ]
    for span in rejected:
        assert span.attributes["hopchain.reason"] == "payload_invalid"
        assert by_id[span.parent or ""].name == f"{first} send"
        [park] = [s for s in spans if s.parent == span.span_id and s.name == f"park {first}.dlq"]
        assert park.kind == PRODUCER
