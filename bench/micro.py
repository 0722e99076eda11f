"""Microbenchmark of the envelope codec: what one hop costs a service, per record.

One hop is what the middleware does for every record: decode (parse, validate the envelope
and the payload, verify the chain), append the service's hop, encode (verifying only the new
hop). Payload 1 KiB; chains of 0, 10 and 50 hops; headers and body mode. Then, at 10 hops,
the same work in its parts.

Times are microseconds per operation: the median of several repeats, each repeat timing
enough back-to-back operations to last a few tens of milliseconds (time.perf_counter_ns,
garbage collection paused while timing, as timeit does).

    python bench/micro.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict

from hopchain.schemas import (
    Attempt,
    AttemptKind,
    AttemptOutcome,
    ContractRegistry,
    Decision,
    Effect,
    EffectKind,
    Envelope,
    EnvelopeCodec,
    ErrorType,
    Failure,
    Position,
    TopicContract,
    WireMode,
    append_hop,
    new_envelope,
    verify_chain,
)
from hopchain.schemas.codec import ENVELOPE_HEADER

HEADERS_TOPIC = "bench.documents"
BODY_TOPIC = "bench.documents.body"
CHAIN_LENGTHS = (0, 10, 50)
BREAKDOWN_HOPS = 10
TARGET_REPEAT_NS = 15_000_000
PAYLOAD_BYTES = 1024
RETRY_EVERY = 5
T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)


class Document(BaseModel):
    """A typical enrichment-pipeline payload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document_id: str
    source: str
    title: str
    body: str
    language: str
    tags: list[str]
    score: float
    revision: int


def payload_of_one_kib() -> Document:
    document = Document(
        document_id="doc-000042",
        source="crawler-eu-1",
        title="Quarterly maintenance window for the claims platform",
        body="",
        language="en",
        tags=["maintenance", "claims", "platform", "notice"],
        score=0.8125,
        revision=7,
    )
    filler = "The platform is read-only during the window; writes are queued. "
    missing = PAYLOAD_BYTES - len(document.model_dump_json())
    body = (filler * (missing // len(filler) + 1))[:missing]
    document = document.model_copy(update={"body": body})
    assert len(document.model_dump_json()) == PAYLOAD_BYTES  # noqa: S101 - checks the setup
    return document


def registry() -> ContractRegistry:
    return ContractRegistry(
        [
            TopicContract(topic=HEADERS_TOPIC, model=Document, owner="bench", name="documents"),
            TopicContract(
                topic=BODY_TOPIC,
                model=Document,
                owner="bench",
                name="documents",
                mode=WireMode.BODY,
            ),
        ]
    )


def chain_of(hops: int) -> Envelope:
    """A chain as a pipeline writes it: every stage forwards, every fifth one after retries."""
    envelope = new_envelope(
        contract="documents", contract_version=1, run_id="run-2025-03-01", work_item_id="doc-42"
    )
    for index in range(hops):
        at = T0 + timedelta(seconds=index)
        failure = None
        attempts: list[Attempt] = []
        if index % RETRY_EVERY == RETRY_EVERY - 1:
            attempts = [
                Attempt(
                    number=1,
                    kind=AttemptKind.TRANSPORT,
                    outcome=AttemptOutcome.FAILED,
                    started_at=at,
                    duration_ms=5000,
                    error_type=ErrorType.TRANSIENT,
                    description="upstream timed out after 5 s",
                ),
                Attempt(
                    number=2,
                    kind=AttemptKind.TRANSPORT,
                    outcome=AttemptOutcome.SUCCEEDED,
                    started_at=at + timedelta(seconds=6),
                    duration_ms=180,
                ),
            ]
            failure = Failure(
                component=f"stage-{index}",
                error_type=ErrorType.TRANSIENT,
                locally_resolvable=True,
                run_id="run-2025-03-01",
                work_item_id="doc-42",
                description="upstream timed out once; the retry succeeded",
                attempts=tuple(attempts),
            )
        envelope = append_hop(
            envelope,
            component=f"stage-{index}",
            instance=f"stage-{index}-7d9f",
            decision=Decision.RECOVERED if failure else Decision.FORWARDED,
            span_id=f"{index + 1:016x}",
            observation="enriched and forwarded",
            received_from=Position(topic=f"bench.stage-{index}", partition=3, offset=100 + index),
            received_at=at,
            decided_at=at + timedelta(milliseconds=250),
            destination=f"bench.stage-{index + 1}",
            attempts=attempts,
            effects=[
                Effect(kind=EffectKind.RECORD_WRITTEN, target="documents", identifier="doc-42")
            ],
            failure=failure,
        )
    return envelope


def measure(operation: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and minimum microseconds per call of ``operation``, over ``repeats`` repeats."""
    operation()  # warm caches
    start = time.perf_counter_ns()
    operation()
    once = max(time.perf_counter_ns() - start, 1)
    number = max(5, TARGET_REPEAT_NS // once)
    samples = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for _ in range(number):
                operation()
            samples.append((time.perf_counter_ns() - start) / number / 1000)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(samples), min(samples)


def hop_cycle(codec: EnvelopeCodec, topic: str, hops: int) -> Callable[[], object]:
    """Read a record with ``hops`` hops, append one, write it: the middleware's work."""
    payload = payload_of_one_kib()
    record = codec.encode(topic, chain_of(hops), payload)
    value, headers = record.value, list(record.headers)

    def cycle() -> object:
        decoded = codec.decode(topic, value, headers)
        outgoing = append_hop(
            decoded.envelope,
            component="bench-stage",
            instance="bench-0",
            decision=Decision.FORWARDED,
            span_id="b000000000000001",
            received_at=T0,
            decided_at=T0,
        )
        return codec.encode(
            topic, outgoing, decoded.payload, verified_hops=len(decoded.envelope.chain)
        )

    return cycle


def parts(codec: EnvelopeCodec, topic: str, hops: int) -> dict[str, Callable[[], object]]:
    payload = payload_of_one_kib()
    envelope = chain_of(hops)
    record = codec.encode(topic, envelope, payload)
    value, headers = record.value, list(record.headers)
    contract = codec.registry.get(topic)
    header = dict(record.headers).get(ENVELOPE_HEADER, b"")
    outgoing = append_hop(
        envelope,
        component="bench-stage",
        instance="bench-0",
        decision=Decision.FORWARDED,
        span_id="b000000000000001",
        decided_at=T0,
    )

    def parse_and_validate() -> object:
        if contract.mode is WireMode.HEADERS:
            return Envelope.model_validate_json(header), Document.model_validate_json(value)
        return contract.body_model.model_validate_json(value)

    return {
        "decode (parse, validate, verify)": lambda: codec.decode(topic, value, headers),
        "  of which parse + validate only": parse_and_validate,
        "  of which chain verify only": lambda: verify_chain(envelope, known_fields_only=True),
        "append one hop only": lambda: append_hop(
            envelope,
            component="bench-stage",
            instance="bench-0",
            decision=Decision.FORWARDED,
            span_id="b000000000000001",
            decided_at=T0,
        ),
        "encode only (new hop checked)": lambda: codec.encode(
            topic, outgoing, payload, verified_hops=hops
        ),
        "encode, every hop re-checked": lambda: codec.encode(topic, outgoing, payload),
    }


def _cell(figures: tuple[float, float]) -> str:
    median, minimum = figures
    return f"{median:>8.1f} ({minimum:>6.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="repeats per figure (median)")
    repeats = parser.parse_args().repeats
    codec = EnvelopeCodec(registry())
    modes = {"headers": HEADERS_TOPIC, "body": BODY_TOPIC}
    started = time.perf_counter()

    print(f"hopchain codec, {PAYLOAD_BYTES} B payload, microseconds per operation:")
    print(f"median (min) of {repeats} repeats; Python {sys.version.split()[0]} on {sys.platform}\n")
    print("decode + validate + append one hop + encode")
    print(f"{'hops in chain':>13} {'headers mode':>17} {'body mode':>17} {'record bytes':>13}")
    for hops in CHAIN_LENGTHS:
        times = [measure(hop_cycle(codec, topic, hops), repeats) for topic in modes.values()]
        size = codec.encode(HEADERS_TOPIC, chain_of(hops), payload_of_one_kib()).size
        print(f"{hops:>13} {_cell(times[0])} {_cell(times[1])} {size:>13}")

    print(f"\nbreakdown at {BREAKDOWN_HOPS} hops")
    print(f"{'':<34} {'headers mode':>17} {'body mode':>17}")
    rows: dict[str, list[tuple[float, float]]] = {}
    for topic in modes.values():
        for name, operation in parts(codec, topic, BREAKDOWN_HOPS).items():
            rows.setdefault(name, []).append(measure(operation, repeats))
    for name, (in_headers, in_body) in rows.items():
        print(f"{name:<34} {_cell(in_headers)} {_cell(in_body)}")
    print(f"\n({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
