"""What hopchain adds to the Avro serde's own cost, per record, on a real schema registry.

The same records, in the same process and run, four ways:

- ``serde``: confluent-kafka's ``AvroDeserializer`` then ``AvroSerializer`` on the decoded
  record, nothing else (a service that reads a record and writes it on);
- ``serde, changed``: the same, one field of the decoded record changed before it is written;
- ``hopchain, forwarded``: the codec's decode of the framed record under an Avro contract (the
  envelope read, the payload decoded by the same deserializer and validated by its pydantic
  model), one hop appended, the codec's encode of the record forwarded: a payload written on
  as it was read is written as the exact bytes read, not encoded again;
- ``hopchain, changed``: the same with one field of the payload changed, so that it is
  encoded again (its dictionary validated by the model first; the format's first write for
  the model is also read back, as its readers will read it, before it may be sent).

Beside them, the payload layer alone (``TopicContract.validate_payload`` then
``framed_payload``: what hopchain does around the serde without the envelope), and the codec's
cycle of the same payloads under a JSON contract (what the envelope costs without a registry
format). The registry is the one ``HOPCHAIN_SCHEMA_REGISTRY_URL`` names, else a
:class:`~hopchain.testing.LocalRegistry` started for the run; its schema is registered once,
and the serdes cache it by id after the first call (the timed loops make no request).

Times are CPU microseconds per record (``time.process_time_ns``), garbage collection paused:
each round times every way over the same records in turn (a busy moment of the shared machine
slows them alike), the figure is the median of the rounds. The target of issue #36: hopchain
adds at most 10% to the serde's own cost.

    python -m bench.registry_serde [--rounds 7] [--records 200] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bench.micro import T0, Document, chain_of, payload_of_one_kib
from hopchain.formats import AvroFormat
from hopchain.formats.registry import REGISTRY_URL_SETTING
from hopchain.schemas import ContractRegistry, Decision, EnvelopeCodec, TopicContract, append_hop
from hopchain.testing import LocalRegistry

AVRO_TOPIC = "bench.documents.avro"
JSON_TOPIC = "bench.documents"
TARGET = 1.10
DOCUMENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Document",
    "namespace": "bench",
    "fields": [
        {"name": "document_id", "type": "string"},
        {"name": "source", "type": "string"},
        {"name": "title", "type": "string"},
        {"name": "body", "type": "string"},
        {"name": "language", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "score", "type": "double"},
        {"name": "revision", "type": "long"},
    ],
}
"""bench.micro's 1 KiB ``Document`` as an Avro record."""

Cycle = Callable[[int], object]
"""One record's work; the argument picks the record."""


@contextlib.contextmanager
def registry_url() -> Iterator[str]:
    """The registry named by ``HOPCHAIN_SCHEMA_REGISTRY_URL``, else a local one for the run."""
    named = os.environ.get(REGISTRY_URL_SETTING)
    if named:
        yield named
        return
    with LocalRegistry() as local:
        print(f"Apicurio Registry {local.version} started in {local.startup_seconds:.1f} s")
        yield local.url


def documents(count: int) -> list[Document]:
    """``count`` distinct 1 KiB documents (their ids, scores and revisions differ)."""
    base = payload_of_one_kib()
    return [
        base.model_copy(
            update={
                "document_id": f"doc-{number:06d}",
                "revision": number,
                "score": number / count,
            }
        )
        for number in range(count)
    ]


def framed_records(
    codec: EnvelopeCodec, topic: str, payloads: list[Document]
) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """Each payload written by the codec under ``topic``'s contract, with a one-hop chain."""
    records = []
    for payload in payloads:
        record = codec.encode(topic, chain_of(1, destination=topic), payload)
        records.append((record.value, list(record.headers)))
    return records


def serde_cycle(url: str, records: list[bytes], *, change: bool) -> Cycle:
    """confluent-kafka's deserializer then serializer, alone."""
    client = SchemaRegistryClient({"url": url, "timeout": 30})
    read = AvroDeserializer(client, json.dumps(DOCUMENT_SCHEMA))
    write = AvroSerializer(
        client,
        json.dumps(DOCUMENT_SCHEMA),
        conf={"auto.register.schemas": False, "use.latest.version": False},
    )
    context = SerializationContext(AVRO_TOPIC, MessageField.VALUE)

    def cycle(index: int) -> object:
        record = read(records[index], context)
        if change:
            record["revision"] += 1
        return write(record, context)

    return cycle


def codec_cycle(
    codec: EnvelopeCodec,
    topic: str,
    records: list[tuple[bytes, list[tuple[str, bytes]]]],
    *,
    change: bool,
) -> Cycle:
    """The codec's decode, one hop appended, the codec's encode of the record forwarded."""

    def cycle(index: int) -> object:
        value, headers = records[index]
        decoded = codec.decode(topic, value, headers)
        payload = decoded.payload
        if change:
            payload = payload.model_copy(update={"revision": payload.revision + 1})
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
            topic,
            outgoing,
            payload,
            verified_hops=decoded.envelope.hop_count,
            read=decoded.payload_read,
        )

    return cycle


def payload_cycle(contract: TopicContract, records: list[bytes], *, change: bool) -> Cycle:
    """The payload layer alone: read with the contract, written on (framed) by it."""

    def cycle(index: int) -> object:
        raw = records[index]
        payload: Any = contract.validate_payload(raw)
        if change:
            payload = payload.model_copy(update={"revision": payload.revision + 1})
        return contract.framed_payload(payload, [(contract.model, False, raw, "")])

    return cycle


def decodes(
    codec: EnvelopeCodec, framed: list[tuple[bytes, Any]], as_json: list[tuple[bytes, Any]]
) -> dict[str, Cycle]:
    """The codec's decode alone, of the same payloads under each contract."""
    return {
        "  codec.decode, Avro": lambda index: codec.decode(AVRO_TOPIC, *framed[index]),
        "  codec.decode, JSON": lambda index: codec.decode(JSON_TOPIC, *as_json[index]),
    }


def parts(url: str, contract: TopicContract, records: list[bytes]) -> dict[str, Cycle]:
    """Each direction alone: the serde's call, and hopchain's around the same call."""
    client = SchemaRegistryClient({"url": url, "timeout": 30})
    read = AvroDeserializer(client, json.dumps(DOCUMENT_SCHEMA))
    write = AvroSerializer(
        client,
        json.dumps(DOCUMENT_SCHEMA),
        conf={"auto.register.schemas": False, "use.latest.version": False},
    )
    context = SerializationContext(AVRO_TOPIC, MessageField.VALUE)
    avro = contract.payload_format
    assert avro is not None  # noqa: S101 - an Avro contract
    decoded = [read(raw, context) for raw in records]
    models = [contract.model.model_validate(record) for record in decoded]
    return {
        "  AvroDeserializer": lambda index: read(records[index], context),
        "  AvroFormat.read": lambda index: avro.read(AVRO_TOPIC, records[index]),
        "  validate_payload": lambda index: contract.validate_payload(records[index]),
        "  AvroSerializer": lambda index: write(decoded[index], context),
        "  AvroFormat.write": lambda index: avro.write(AVRO_TOPIC, decoded[index]),
        "  write_payload": lambda index: contract.write_payload(models[index]),
    }


def time_per_record(cycle: Cycle, count: int, passes: int) -> float:
    """CPU microseconds per record over ``passes`` passes of the ``count`` records."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.process_time_ns()
        for _ in range(passes):
            for index in range(count):
                cycle(index)
        return (time.process_time_ns() - start) / (passes * count) / 1000
    finally:
        if gc_was_enabled:
            gc.enable()


def check_same_bytes(codec: EnvelopeCodec, records: list[tuple[bytes, Any]]) -> None:
    """A payload forwarded as read is written as the bytes read, and a changed one is not."""
    value, _ = records[0]
    forwarded = codec_cycle(codec, AVRO_TOPIC, records, change=False)(0)
    changed = codec_cycle(codec, AVRO_TOPIC, records, change=True)(0)
    if getattr(forwarded, "value", None) != value or getattr(changed, "value", value) == value:
        raise SystemExit("the forwarded payload was not written as the bytes read")


def profile(cycles: dict[str, Cycle], count: int) -> None:
    """cProfile of the hopchain ways: the functions that take the most time of their own."""
    for name in ("hopchain, forwarded", "hopchain, changed"):
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(5):
            for index in range(count):
                cycles[name](index)
        profiler.disable()
        print(f"\nprofile of {name!r}, {5 * count} records, by own time:")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(18)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds (median)")
    parser.add_argument("--records", type=int, default=200, help="distinct records")
    parser.add_argument("--passes", type=int, default=5, help="passes over them per round")
    parser.add_argument("--profile", action="store_true", help="cProfile the hopchain ways")
    args = parser.parse_args()
    started = time.perf_counter()
    before = load_average()
    with registry_url() as url:
        with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
            client.register_schema(
                f"{AVRO_TOPIC}-value", Schema(json.dumps(DOCUMENT_SCHEMA), "AVRO")
            )
        avro = TopicContract(
            topic=AVRO_TOPIC,
            model=Document,
            owner="bench",
            name="documents",
            payload_format=AvroFormat(schema=json.dumps(DOCUMENT_SCHEMA), registry_url=url),
        )
        plain = TopicContract(topic=JSON_TOPIC, model=Document, owner="bench", name="documents")
        codec = EnvelopeCodec(ContractRegistry([avro, plain]))
        payloads = documents(args.records)
        framed = framed_records(codec, AVRO_TOPIC, payloads)
        as_json = framed_records(codec, JSON_TOPIC, payloads)
        values = [value for value, _ in framed]
        check_same_bytes(codec, framed)
        cycles: dict[str, Cycle] = {
            "serde": serde_cycle(url, values, change=False),
            "serde, changed": serde_cycle(url, values, change=True),
            "hopchain, forwarded": codec_cycle(codec, AVRO_TOPIC, framed, change=False),
            "hopchain, changed": codec_cycle(codec, AVRO_TOPIC, framed, change=True),
            "payload layer, forwarded": payload_cycle(avro, values, change=False),
            "payload layer, changed": payload_cycle(avro, values, change=True),
            "JSON contract, forwarded": codec_cycle(codec, JSON_TOPIC, as_json, change=False),
            "JSON contract, changed": codec_cycle(codec, JSON_TOPIC, as_json, change=True),
            **parts(url, avro, values),
            **decodes(codec, framed, as_json),
        }
        for cycle in cycles.values():  # every schema fetched and cached before timing
            time_per_record(cycle, args.records, 1)
        samples: dict[str, list[float]] = {name: [] for name in cycles}
        for _ in range(args.rounds):
            for name, cycle in cycles.items():
                samples[name].append(time_per_record(cycle, args.records, args.passes))
        if args.profile:
            profile(cycles, args.records)
    after = load_average()

    median = {name: statistics.median(found) for name, found in samples.items()}
    print(
        f"\nAvro, {len(values[0])} B framed ({len(payloads[0].model_dump_json())} B as JSON), "
        f"{args.records} records x {args.passes} passes a round, {args.rounds} rounds; "
        f"CPU µs per record, median (min-max of the rounds); Python {sys.version.split()[0]}; "
        f"load {before} before, {after} after"
    )
    for name, found in samples.items():
        if name == "  AvroDeserializer":
            print("  one direction at a time:")
        print(f"  {name:<26} {median[name]:>7.1f}  ({min(found):.1f}-{max(found):.1f})")
    print("ratios to the serde alone (medians; per round in brackets):")
    for ours, theirs in (
        ("hopchain, forwarded", "serde"),
        ("hopchain, changed", "serde, changed"),
        ("payload layer, forwarded", "serde"),
        ("payload layer, changed", "serde, changed"),
        ("  AvroFormat.read", "  AvroDeserializer"),
        ("  validate_payload", "  AvroDeserializer"),
        ("  AvroFormat.write", "  AvroSerializer"),
        ("  write_payload", "  AvroSerializer"),
    ):
        per_round = ", ".join(
            f"{a / b:.2f}" for a, b in zip(samples[ours], samples[theirs], strict=True)
        )
        ratio = median[ours] / median[theirs]
        verdict = "met" if ratio <= TARGET else "missed"
        print(f"  {ours:<26} {ratio:>5.2f}  (target <= {TARGET:.2f}: {verdict}) [{per_round}]")
    for way in ("forwarded", "changed"):
        envelope = median[f"JSON contract, {way}"]
        print(
            f"  the envelope's share, {way}: the JSON contract's cycle {envelope:.1f} µs; "
            f"hopchain's Avro cycle minus it {median[f'hopchain, {way}'] - envelope:+.1f} µs"
        )
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
