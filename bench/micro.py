"""Microbenchmark of the envelope codec: what one hop costs a service, per record.

One hop is what the middleware does for every record: decode (parse, validate the envelope
and the payload, verify the chain), append the service's hop, encode (verifying only the new
hop). Payload 1 KiB; chains of 1, 10 and 30 hops; headers and body mode; envelope schema 1
and schema 2 side by side in one run, and beside them the lean reference reader of
``bench/lean_reader.py`` doing the same hop (headers mode): the ratio at 10 hops and the cost
of each further earlier hop are the figures to watch. Then, at 10 hops, the work in its parts.

Times are CPU microseconds per operation (the machine is shared: CPU time is what one hop
costs, wall time also counts waiting for a core): the median of several repeats, each repeat
timing enough back-to-back operations to last a few tens of milliseconds
(time.process_time_ns, garbage collection paused while timing, as timeit does).

    python -m bench.micro [--repeats 7]
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

from bench.lean_reader import LeanHop, lean_cycle
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
from hopchain.schemas.sealed import CHAIN_END, CHAIN_START, link
from hopchain.schemas.text_v2 import load_envelope, read_envelope_text

HEADERS_TOPIC = "bench.documents"
BODY_TOPIC = "bench.documents.body"
CHAIN_LENGTHS = (1, 10, 30)
SCHEMAS = (1, 2)
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


def chain_of(hops: int, *, schema: int = 2, destination: str = HEADERS_TOPIC) -> Envelope:
    """A chain as a pipeline writes it: every stage forwards, every fifth one after retries.

    The last hop wrote to ``destination``: the record is read from there.
    """
    envelope = new_envelope(
        contract="documents",
        contract_version=1,
        run_id="run-2025-03-01",
        work_item_id="doc-42",
        schema=schema,
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
            destination=destination if index == hops - 1 else f"bench.stage-{index + 1}",
            attempts=attempts,
            effects=[
                Effect(kind=EffectKind.RECORD_WRITTEN, target="documents", identifier="doc-42")
            ],
            failure=failure,
        )
    return envelope


def measure(operation: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and minimum CPU microseconds per call of ``operation``, over ``repeats`` repeats."""
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
            start = time.process_time_ns()
            for _ in range(number):
                operation()
            samples.append((time.process_time_ns() - start) / number / 1000)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(samples), min(samples)


def hop_cycle(codec: EnvelopeCodec, topic: str, hops: int) -> Callable[[], object]:
    """Read a record with ``hops`` hops, append one, write it: the middleware's work."""
    payload = payload_of_one_kib()
    record = codec.encode(topic, chain_of(hops, schema=codec.schema, destination=topic), payload)
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
            destination=topic,
        )
        return codec.encode(
            topic, outgoing, decoded.payload, verified_hops=decoded.envelope.hop_count
        )

    return cycle


def lean_hop_cycle(hops: int) -> Callable[[], object]:
    """The same hop as :func:`hop_cycle` (headers mode) by the lean reference reader."""
    codec = EnvelopeCodec(registry())
    payload = payload_of_one_kib()
    record = codec.encode(HEADERS_TOPIC, chain_of(hops, destination=HEADERS_TOPIC), payload)
    text = dict(record.headers)[ENVELOPE_HEADER]
    value = record.value
    new = LeanHop(
        component="bench-stage",
        contract="documents",
        contract_version=1,
        decided_at="2025-03-01T12:00:00Z",
        decision="forwarded",
        degradation=None,
        destination=HEADERS_TOPIC,
        effects=[],
        failure=None,
        instance="bench-0",
        observation="",
        payload_digest=None,
        received_at="2025-03-01T12:00:00Z",
        received_from=None,
        span_id="b000000000000001",
        tries=[],
    )
    return lambda: lean_cycle(text, value, Document, new)


def parts(codec: EnvelopeCodec, topic: str, hops: int) -> dict[str, Callable[[], object]]:
    """The parts of one hop at ``hops`` hops, for the codec's envelope schema."""
    if codec.schema == 2:  # noqa: PLR2004
        return _parts_v2(codec, topic, hops)
    payload = payload_of_one_kib()
    envelope = chain_of(hops, schema=1, destination=topic)
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
        destination=topic,
    )

    def parse_and_validate() -> object:
        if contract.mode is WireMode.HEADERS:
            return load_envelope(header), Document.model_validate_json(value)
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
            destination=topic,
        ),
        "encode only (new hop checked)": lambda: codec.encode(
            topic, outgoing, payload, verified_hops=hops
        ),
    }


def _parts_v2(codec: EnvelopeCodec, topic: str, hops: int) -> dict[str, Callable[[], object]]:
    payload = payload_of_one_kib()
    record = codec.encode(topic, chain_of(hops, destination=topic), payload)
    value, headers = record.value, list(record.headers)
    text = dict(record.headers).get(ENVELOPE_HEADER, value)
    decoded = codec.decode(topic, value, headers)
    chain = text[text.index(CHAIN_START) + len(CHAIN_START) : text.index(CHAIN_END)]
    sealed = chain.split(b",\n")

    def append() -> Envelope:
        return append_hop(
            decoded.envelope,
            component="bench-stage",
            instance="bench-0",
            decision=Decision.FORWARDED,
            span_id="b000000000000001",
            decided_at=T0,
            destination=topic,
        )

    outgoing = append()

    def link_all() -> object:
        previous = "0" * 64
        for hop in sealed:
            previous = link(previous, hop)
        return previous

    return {
        "decode (read, check every hop, payload)": lambda: codec.decode(topic, value, headers),
        "  of which envelope text read": lambda: read_envelope_text(text, keyring=None),
        "  of which digests of every hop": link_all,
        "  of which payload validate": lambda: Document.model_validate_json(
            value if contract_mode(codec, topic) is WireMode.HEADERS else payload_json(payload)
        ),
        "append one hop only": append,
        "encode only (new hop sealed, spliced)": lambda: codec.encode(
            topic, outgoing, payload, verified_hops=hops
        ),
    }


def contract_mode(codec: EnvelopeCodec, topic: str) -> WireMode:
    return codec.registry.get(topic).mode


def payload_json(payload: BaseModel) -> bytes:
    return payload.__pydantic_serializer__.to_json(payload)


def _cell(figures: tuple[float, float]) -> str:
    median, minimum = figures
    return f"{median:>8.1f} ({minimum:>6.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="repeats per figure (median)")
    repeats = parser.parse_args().repeats
    modes = {"headers": HEADERS_TOPIC, "body": BODY_TOPIC}
    started = time.perf_counter()

    print(f"hopchain codec, {PAYLOAD_BYTES} B payload, CPU microseconds per operation:")
    print(f"median (min) of {repeats} repeats; Python {sys.version.split()[0]} on {sys.platform}\n")
    print("decode + validate + append one hop + encode")
    print(f"{'schema':>6} {'hops':>5} {'headers mode':>17} {'body mode':>17} {'record bytes':>13}")
    medians: dict[tuple[int, int, str], float] = {}
    for hops in CHAIN_LENGTHS:
        for schema in SCHEMAS:
            codec = EnvelopeCodec(registry(), schema=schema)
            times = [measure(hop_cycle(codec, topic, hops), repeats) for topic in modes.values()]
            for mode, figures in zip(modes, times, strict=True):
                medians[schema, hops, mode] = figures[0]
            chain = chain_of(hops, schema=schema, destination=HEADERS_TOPIC)
            size = codec.encode(HEADERS_TOPIC, chain, payload_of_one_kib()).size
            print(f"{schema:>6} {hops:>5} {_cell(times[0])} {_cell(times[1])} {size:>13}")

    first, last = CHAIN_LENGTHS[1], CHAIN_LENGTHS[-1]
    lean = {hops: measure(lean_hop_cycle(hops), repeats)[0] for hops in CHAIN_LENGTHS}
    print("\nschema 2, headers mode, beside the lean reference reader (bench/lean_reader.py)")
    print(f"{'hops':>5} {'hop_cycle':>10} {'lean':>8} {'ratio':>6}")
    for hops in CHAIN_LENGTHS:
        ours = medians[2, hops, "headers"]
        print(f"{hops:>5} {ours:>10.1f} {lean[hops]:>8.1f} {ours / lean[hops]:>6.2f}")
    ours_slope = (medians[2, last, "headers"] - medians[2, first, "headers"]) / (last - first)
    lean_slope = (lean[last] - lean[first]) / (last - first)
    print(
        f"  ratio at {first} hops {medians[2, first, 'headers'] / lean[first]:.2f} (target <= 2.0);"
        f" per further earlier hop ({first}->{last}): hop_cycle {ours_slope:.2f} µs "
        f"(target <= 2), lean {lean_slope:.2f} µs"
    )
    print("\nper additional earlier hop, between", first, "and", last, "hops (median µs):")
    for schema in SCHEMAS:
        slopes = [
            (medians[schema, last, mode] - medians[schema, first, mode]) / (last - first)
            for mode in modes
        ]
        body_ratio = medians[schema, first, "body"] / medians[schema, first, "headers"]
        print(
            f"  schema {schema}: headers {slopes[0]:.2f}, body {slopes[1]:.2f}; "
            f"body / headers at {first} hops {body_ratio:.2f}"
        )
    print(
        f"  schema 1 / schema 2 at {first} hops, headers mode: "
        f"{medians[1, first, 'headers'] / medians[2, first, 'headers']:.1f}x"
    )

    for schema in SCHEMAS:
        codec = EnvelopeCodec(registry(), schema=schema)
        print(f"\nschema {schema}, breakdown at {BREAKDOWN_HOPS} hops")
        print(f"{'':<40} {'headers mode':>17} {'body mode':>17}")
        rows: dict[str, list[tuple[float, float]]] = {}
        for topic in modes.values():
            for name, operation in parts(codec, topic, BREAKDOWN_HOPS).items():
                rows.setdefault(name, []).append(measure(operation, repeats))
        for name, (in_headers, in_body) in rows.items():
            print(f"{name:<40} {_cell(in_headers)} {_cell(in_body)}")
    print(f"\n({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
