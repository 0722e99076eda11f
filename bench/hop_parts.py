"""The calls inside one hop at 10 hops, each timed alone on the CPU clock (no profiler).

Uses the workload of ``bench/micro.py`` (its payload, its 10-hop chain, headers mode) and
times each call the codec makes while reading, appending and writing, so the profile's
shares can be checked against plain timings. Minimum of 7 repeats of CPU time: the least
disturbed by other processes on a busy machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import micro
from hopchain.schemas import (
    ENVELOPE_HEADER,
    Decision,
    Envelope,
    EnvelopeCodec,
    Hop,
    append_hop,
    verify_chain,
)
from hopchain.schemas.fields import _canonical_timestamp
from hopchain.schemas.text_v2 import load_envelope
from hopchain.schemas.v1.codec import check_fields, revalidate
from hopchain.schemas.v1.digest import has_unknown_fields, hop_digest

HOPS = 10
REPEATS = 7
SLICE_SECONDS = 0.03


@dataclass(frozen=True)
class Part:
    """One call, its CPU microseconds, and how often one hop makes it."""

    name: str
    micros: float
    note: str = ""


def cpu_micros(operation: Callable[[], object]) -> float:
    """Minimum over repeats of CPU microseconds per call."""
    operation()
    calls, started = 0, time.process_time()
    while time.process_time() - started < SLICE_SECONDS:
        operation()
        calls += 1
    calls = max(calls, 10)
    best = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        for _ in range(calls):
            operation()
        best = min(best, (time.process_time() - started) / calls * 1e6)
    return best


def measure() -> list[Part]:
    """The calls of one hop with envelope schema 1 (``bench/micro.py`` has schema 2's parts)."""
    codec = EnvelopeCodec(micro.registry(), schema=1)
    topic = micro.HEADERS_TOPIC
    payload = micro.payload_of_one_kib()
    model = type(payload)
    envelope = micro.chain_of(HOPS, schema=1)
    record = codec.encode(topic, envelope, payload)
    value, headers = record.value, list(record.headers)
    header = dict(record.headers)[ENVELOPE_HEADER]
    outgoing = append_hop(
        envelope,
        component="bench-stage",
        instance="bench-0",
        decision=Decision.FORWARDED,
        span_id="b000000000000001",
        decided_at=micro.T0,
    )
    payload_json = payload.__pydantic_serializer__.to_json(payload)
    plain_hop = envelope.chain[0]
    retry_hop = envelope.chain[micro.RETRY_EVERY - 1]
    plain_json, retry_json = plain_hop.model_dump_json(), retry_hop.model_dump_json()
    timestamps = header.count(b'Z"')
    return [
        Part("one hop: decode + append + encode", cpu_micros(micro.hop_cycle(codec, topic, HOPS))),
        Part("decode", cpu_micros(lambda: codec.decode(topic, value, headers))),
        Part(
            "  load_envelope(header)",
            cpu_micros(lambda: load_envelope(header)),
            f"{len(header):,} B, {timestamps} timestamps",
        ),
        Part(
            "  verify_chain, every received hop",
            cpu_micros(lambda: verify_chain(envelope, known_fields_only=True)),
            f"re-serialises and hashes {HOPS} hops",
        ),
        Part(
            "  unknown-field check, every received hop", cpu_micros(lambda: check_fields(envelope))
        ),
        Part("  payload validation", cpu_micros(lambda: model.model_validate_json(value))),
        Part("append_hop", cpu_micros(lambda: _append(envelope))),
        Part(
            "encode (new hop checked)",
            cpu_micros(lambda: codec.encode(topic, outgoing, payload, verified_hops=HOPS)),
        ),
        Part(
            "  envelope to JSON, all hops",
            cpu_micros(lambda: outgoing.__pydantic_serializer__.to_json(outgoing)),
            f"the {HOPS} received hops serialised again",
        ),
        Part(
            "  re-validation of envelope and new hop",
            cpu_micros(lambda: revalidate(outgoing, HOPS)),
            "repeats much of append_hop's own validation",
        ),
        Part("  verify_chain, new hop", cpu_micros(lambda: verify_chain(outgoing, start=HOPS))),
        Part(
            "  payload to JSON + re-read",
            cpu_micros(lambda: model.model_validate_json(payload_json)),
        ),
        Part(
            "hop_digest, plain hop",
            cpu_micros(lambda: hop_digest(plain_hop, known_fields_only=True)),
        ),
        Part(
            "hop_digest, hop with retries and a failure",
            cpu_micros(lambda: hop_digest(retry_hop, known_fields_only=True)),
        ),
        Part(
            "Hop.model_validate_json, plain hop",
            cpu_micros(lambda: Hop.model_validate_json(plain_json)),
        ),
        Part(
            "Hop.model_validate_json, hop with retries",
            cpu_micros(lambda: Hop.model_validate_json(retry_json)),
        ),
        Part(
            "has_unknown_fields, hop with retries",
            cpu_micros(lambda: has_unknown_fields(retry_hop)),
        ),
        Part(
            "UtcDatetime's Python validator, one timestamp",
            cpu_micros(lambda: _canonical_timestamp("2025-03-01T12:00:00.250000Z")),
            "runs for every timestamp read",
        ),
        Part(
            "an enum's .value (what the serializer calls)",
            cpu_micros(lambda: Decision.FORWARDED.value),
            "once per enum field serialised",
        ),
    ]


def _append(envelope: Envelope) -> Envelope:
    return append_hop(
        envelope,
        component="bench-stage",
        instance="bench-0",
        decision=Decision.FORWARDED,
        span_id="b000000000000001",
        decided_at=micro.T0,
    )


if __name__ == "__main__":
    for part in measure():
        print(f"{part.name:<50} {part.micros:8.1f} µs  {part.note}")
