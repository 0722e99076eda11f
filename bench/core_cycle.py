"""The hop cycle through the compiled core (``hopchain._core``), beside the lean reference.

One hop is what a service does for every record: read it (``read_batch``: every hop parsed,
checked and hashed), validate the payload with its pydantic model (``model_validate_json`` on
the bytes the verdict points at), append the service's hop and write the outgoing record
(its value and headers). It is timed three ways, beside the lean reference reader of
``bench/lean_reader.py`` (unchanged) doing the same hop, in the same process and run:

- ``verdict``: one record a call; the hop is appended to the verdict (``append_verdict``),
  without reading the text again;
- ``re-read``: one record a call; the hop is appended with ``append_hop``, which reads
  (parses and checks) the received text again;
- ``batch``: a fetch of ``--batch`` records in one ``read_batch`` and one ``append_batch``,
  per record.

Payload 1 KiB; chains of 1, 10 and 30 hops; headers mode and body mode. Times are CPU
microseconds per record (``time.process_time_ns``), the median of ``--repeats`` repeats, each
timing enough back-to-back operations to last a few tens of milliseconds, garbage collection
paused, the ways timed in turn within each repeat (so that a busy moment of the shared
machine slows them alike). The targets of issue #35: at most 0.75x the lean reference
at 1 hop, 0.5x at 10, 0.4x at 30, and 1.2 us per further earlier hop (10 to 30 hops).

    python -m bench.core_cycle [--repeats 15] [--batch 100]
    python -m bench.core_cycle --write DIR

``--write DIR`` times nothing: it writes the received records as ``DIR/<mode><hops>.json``
(``{"value": ..., "headers": [[name, value], ...]}``), the input of the crate's
``read_speed`` example, which times and counts the reader alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from bench.micro import (
    BODY_TOPIC,
    CHAIN_LENGTHS,
    HEADERS_TOPIC,
    PAYLOAD_BYTES,
    TARGET_REPEAT_NS,
    Document,
    chain_of,
    lean_hop_cycle,
    payload_of_one_kib,
    registry,
)
from hopchain import _core
from hopchain.schemas import EnvelopeCodec
from hopchain.schemas.codec import DEGRADED_HEADER, ENVELOPE_HEADER, TRACEPARENT_HEADER

TARGETS = {1: 0.75, 10: 0.5, 30: 0.4}
TARGET_SLOPE_US = 1.2
MODES = {"headers": HEADERS_TOPIC, "body": BODY_TOPIC}
PAYLOAD_MEMBER = b',"payload":'

Headers = list[tuple[str, bytes]]
Outgoing = tuple[bytes, Headers]

NEW_HOP: dict[str, Any] = {
    "component": "bench-stage",
    "contract": "documents",
    "contract_version": 1,
    "decided_at": "2025-03-01T12:00:00Z",
    "decision": "forwarded",
    "degradation": None,
    "effects": [],
    "failure": None,
    "instance": "bench-0",
    "observation": "",
    "payload_digest": None,
    "received_at": "2025-03-01T12:00:00Z",
    "received_from": None,
    "span_id": "b000000000000001",
    "tries": [],
}
"""The service's hop, as the lean reference's (``destination`` is set per topic)."""


@cache
def received(topic: str, hops: int) -> tuple[bytes, Headers]:
    """A record of ``topic`` with ``hops`` hops, its last one written to ``topic``.

    One per topic and length: every way of writing is given the same record.
    """
    codec = EnvelopeCodec(registry())
    record = codec.encode(topic, chain_of(hops, destination=topic), payload_of_one_kib())
    assert record.value is not None  # noqa: S101 - checks the setup
    return record.value, [(name, raw) for name, raw in record.headers if raw is not None]


def core_topic(mode: str) -> Any:
    return _core.Topic(MODES[mode], mode, "documents", 1)


def outgoing(mode: str, text: bytes, payload: bytes, trace: str, degraded: str | None) -> Outgoing:
    """The record to send: value and headers, as the writer's bytes say."""
    headers: Headers = [(TRACEPARENT_HEADER, trace.encode())]
    if degraded is not None:
        headers.append((DEGRADED_HEADER, degraded.encode()))
    if mode == "body":
        return text[:-1] + PAYLOAD_MEMBER + payload + b"}", headers
    headers.append((ENVELOPE_HEADER, text))
    return payload, headers


def _payload(value: bytes, verdict: Any) -> bytes:
    """The payload's bytes the verdict points at (the value itself in headers mode)."""
    if verdict.kind != "accepted":
        msg = f"the bench's record was refused: {verdict!r}"
        raise ValueError(msg)
    start, end = verdict.payload
    return value if start == 0 and end == len(value) else value[start:end]


def verdict_cycle(mode: str, hops: int) -> Callable[[], Outgoing]:
    """Read, validate, append to the verdict, write: one record a call."""
    value, headers = received(MODES[mode], hops)
    records = [(value, headers)]
    topic = core_topic(mode)
    hop = {**NEW_HOP, "destination": MODES[mode]}
    read_batch, append_verdict = _core.read_batch, _core.append_verdict
    validate = Document.model_validate_json

    def cycle() -> Outgoing:
        (verdict,) = read_batch(records, topic)
        payload = _payload(value, verdict)
        validate(payload)
        text, trace, degraded = append_verdict(verdict, hop, payload)
        return outgoing(mode, text, payload, trace, degraded)

    return cycle


def reread_cycle(mode: str, hops: int) -> Callable[[], Outgoing]:
    """As :func:`verdict_cycle`, appending with ``append_hop`` (the text is read again)."""
    value, headers = received(MODES[mode], hops)
    records = [(value, headers)]
    text_in = dict(headers)[ENVELOPE_HEADER] if mode == "headers" else value
    topic = core_topic(mode)
    hop = {**NEW_HOP, "destination": MODES[mode]}
    validate = Document.model_validate_json

    def cycle() -> Outgoing:
        (verdict,) = _core.read_batch(records, topic)
        payload = _payload(value, verdict)
        validate(payload)
        text, trace, degraded = _core.append_hop(text_in, hop, payload)
        return outgoing(mode, text, payload, trace, degraded)

    return cycle


class BatchCycle:
    """A fetch of ``size`` records read in one call and written in one call."""

    def __init__(self, mode: str, hops: int, size: int) -> None:
        value, headers = received(MODES[mode], hops)
        self.mode = mode
        self.size = size
        self.records = [(value, headers)] * size
        self.topic = core_topic(mode)
        self.hop = {**NEW_HOP, "destination": MODES[mode]}

    def __call__(self) -> list[Outgoing]:
        verdicts = _core.read_batch(self.records, self.topic)
        items = []
        for (value, _), verdict in zip(self.records, verdicts, strict=True):
            payload = _payload(value, verdict)
            Document.model_validate_json(payload)
            items.append((verdict, self.hop, payload))
        sent = []
        for (_, _, payload), written in zip(items, _core.append_batch(items), strict=True):
            if isinstance(written, ValueError):
                raise written
            text, trace, degraded = written
            sent.append(outgoing(self.mode, text, payload, trace, degraded))
        return sent


def measure_together(operations: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median CPU µs per call of each operation, the operations timed in turn in each repeat.

    As ``bench.micro.measure`` (each repeat times enough calls to last ~15 ms, garbage
    collection paused), but interleaved: on a shared machine a busy moment slows every
    operation of a repeat alike, so that their ratios compare the same moments.
    """
    numbers = {}
    for name, operation in operations.items():
        operation()  # warm caches
        start = time.perf_counter_ns()
        operation()
        numbers[name] = max(5, TARGET_REPEAT_NS // max(time.perf_counter_ns() - start, 1))
    samples: dict[str, list[float]] = {name: [] for name in operations}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, operation in operations.items():
                start = time.process_time_ns()
                for _ in range(numbers[name]):
                    operation()
                samples[name].append((time.process_time_ns() - start) / numbers[name] / 1000)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: statistics.median(times) for name, times in samples.items()}


def _check_same_bytes(mode: str, hops: int, size: int) -> None:
    """Every way of writing gives the same record: the figures compare the same work."""
    first = verdict_cycle(mode, hops)()
    batch = BatchCycle(mode, hops, size)()
    if reread_cycle(mode, hops)() != first or any(sent != first for sent in batch):
        msg = f"the core's writers disagree ({mode} mode, {hops} hops)"
        raise AssertionError(msg)


def write_records(folder: Path) -> None:
    """Write each received record as JSON text, for the crate's ``read_speed`` example."""
    folder.mkdir(parents=True, exist_ok=True)
    for mode, topic in MODES.items():
        for hops in CHAIN_LENGTHS:
            value, headers = received(topic, hops)
            record = {
                "value": value.decode(),
                "headers": [[name, raw.decode()] for name, raw in headers],
            }
            (folder / f"{mode}{hops}.json").write_text(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="repeats per figure (median)")
    parser.add_argument("--batch", type=int, default=100, help="records in a fetch")
    parser.add_argument("--write", type=Path, help="write the received records here; time nothing")
    arguments = parser.parse_args()
    if arguments.write is not None:
        write_records(arguments.write)
    else:
        time_cycles(arguments.repeats, arguments.batch)


def time_cycles(repeats: int, size: int) -> None:
    """Time every way at every chain length and print the figures and the targets."""
    started = time.perf_counter()
    print(f"hop cycle through hopchain._core, {PAYLOAD_BYTES} B payload, CPU µs per record:")
    print(f"median of {repeats} repeats; batch {size}; Python {sys.version.split()[0]}\n")

    figures: dict[tuple[str, str, int], float] = {}
    for hops in CHAIN_LENGTHS:
        operations: dict[str, Callable[[], object]] = {"lean headers": lean_hop_cycle(hops)}
        for mode in MODES:
            _check_same_bytes(mode, hops, size)
            operations[f"verdict {mode}"] = verdict_cycle(mode, hops)
            operations[f"re-read {mode}"] = reread_cycle(mode, hops)
            operations[f"batch {mode}"] = BatchCycle(mode, hops, size)
        for name, median in measure_together(operations, repeats).items():
            way, mode = name.split()
            figures[way, mode, hops] = median / size if way == "batch" else median

    ways = ("verdict", "re-read", "batch")
    print(
        f"{'mode':<8} {'hops':>4} {'lean':>7}" + "".join(f" {way:>9} {'ratio':>6}" for way in ways)
    )
    for mode in MODES:
        for hops in CHAIN_LENGTHS:
            lean = figures["lean", "headers", hops]
            cells = "".join(
                f" {figures[way, mode, hops]:>9.1f} {figures[way, mode, hops] / lean:>6.2f}"
                for way in ways
            )
            print(f"{mode:<8} {hops:>4} {lean:>7.1f}{cells}")
    print("(ratios against the lean reference in headers mode, the only mode it has)")

    first, last = CHAIN_LENGTHS[1], CHAIN_LENGTHS[-1]
    print(f"\nper further earlier hop ({first} -> {last} hops), µs:")
    lean_slope = (figures["lean", "headers", last] - figures["lean", "headers", first]) / (
        last - first
    )
    print(f"  lean {lean_slope:.2f}")
    for way in ways:
        for mode in MODES:
            slope = (figures[way, mode, last] - figures[way, mode, first]) / (last - first)
            print(f"  {way:<8} {mode:<8} {slope:.2f}")

    print("\ntargets, headers mode:")
    for way in ("verdict", "batch"):
        for hops, target in TARGETS.items():
            ratio = figures[way, "headers", hops] / figures["lean", "headers", hops]
            verdict = "met" if ratio <= target else "NOT met"
            print(f"  {way:<8} {hops:>2} hops: {ratio:.2f} (<= {target}) {verdict}")
        slope = (figures[way, "headers", last] - figures[way, "headers", first]) / (last - first)
        verdict = "met" if slope <= TARGET_SLOPE_US else "NOT met"
        print(f"  {way:<8} per further hop: {slope:.2f} µs (<= {TARGET_SLOPE_US}) {verdict}")
    print(f"\n({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
