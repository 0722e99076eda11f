"""A schema registry down for 30 s while 2,000 Avro records flow through a FastStream stage.

    python -m bench.registry_outage
    python -m bench.registry_outage --outage 30 --records 2000 --partitions 3
    python -m bench.registry_outage --bootstrap 127.0.0.1:9092 --registry http://127.0.0.1:8080/apis/ccompat/v7

The stage (``HopchainMiddleware``, per-record commits, the default ``RegistryBackoff``: 0.5 s
doubling to 30 s with jitter) reads an Avro topic framed by confluent-kafka's own
``AvroSerializer`` and forwards every order. The registry stands behind a proxy that
answers 503 while it is "down" (an in-memory registry that really restarts forgets its
schema ids; a registry with durable storage keeps them, and so does the proxy). A quarter of
the records is read before the outage, so their schema id is cached; a quarter more of that
schema is written during it and must read on without the registry; the second half carries
a schema version the stage has never seen and must wait. Every second of the outage the
group's committed offsets are checked against the first such record of each partition.

Reports: the pauses hopchain took (count, each length), when the first waiting record was
handled and when the stage had caught up after the registry answered again, the records
lost, handled twice and dead-lettered, and whether an offset ever moved past a record that
needed the registry. Uses ``--bootstrap`` (else $HOPCHAIN_KAFKA_BOOTSTRAP, else a broker of
its own) and ``--registry`` (else $HOPCHAIN_SCHEMA_REGISTRY_URL, else an Apicurio Registry
of its own; Java 21+).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware
from hopchain.formats import AvroFormat
from hopchain.middleware.outage import RegistryBackoff
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.testing import LocalKafka, LocalRegistry, create_topics, unique_topic_name

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}


class Order(BaseModel):
    order_id: str
    amount_cents: int


def say(line: str) -> None:
    print(line, flush=True)


class DownableRegistry:
    """A proxy in front of a registry that answers 503 while ``down``."""

    def __init__(self, upstream: str) -> None:
        self.down = False
        self.refused = 0
        base = upstream.split("/apis/", 1)[0]
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if owner.down:
                    owner.refused += 1
                    self._answer(503, b'{"error_code":50301,"message":"unavailable"}')
                    return
                try:
                    with urllib.request.urlopen(base + self.path, timeout=10) as answer:  # noqa: S310 - the bench's own registry
                        self._answer(answer.status, answer.read())
                except urllib.error.HTTPError as error:
                    self._answer(error.code, error.read())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/apis/" + upstream.split("/apis/")[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Pauses(logging.Handler):
    """Collects the pauses hopchain logs for the registry, with when they were taken."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[float, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "hopchain_event", None) == "schema_registry_unavailable":
            self.seen.append((time.monotonic(), float(getattr(record, "pause_seconds", 0.0))))


def frames(url: str, topic: str, schema: dict[str, Any], numbers: range) -> list[bytes]:
    context = SerializationContext(topic, MessageField.VALUE)
    extra = {"note": "v2"} if schema is ORDER_V2 else {}
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        serializer = AvroSerializer(client, json.dumps(schema))
        framed = []
        for n in numbers:
            data = serializer({"order_id": f"o-{n}", "amount_cents": n, **extra}, context)
            assert data is not None  # noqa: S101 - a value always frames
            framed.append(data)
    return framed


async def send(
    producer: AIOKafkaProducer, topic: str, values: list[bytes], first: int, partitions: int
) -> list[tuple[int, int]]:
    """Send round robin over the partitions; each record's (partition, offset)."""
    sending = [
        await producer.send(topic, value, partition=(first + n) % partitions)
        for n, value in enumerate(values)
    ]
    return [(meta.partition, meta.offset) for meta in await asyncio.gather(*sending)]


async def committed(admin: AIOKafkaAdminClient, group: str, topic: str) -> dict[int, int]:
    offsets = await admin.list_consumer_group_offsets(group)
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        found = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in found.items()}


async def until(condition: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within} s")
        await asyncio.sleep(0.1)


@dataclass
class Stage:
    """The FastStream stage under test and what it handled."""

    broker: KafkaBroker
    middleware: HopchainMiddleware
    group: str
    handled: list[str] = field(default_factory=list)
    up_at: float = 0.0
    """When the registry answered again (0 until then)."""
    first_after: float | None = None
    """Seconds from then to the first record handled."""


def stage(bootstrap: str, proxy: DownableRegistry, source: str, shipped: str) -> Stage:
    def contract(topic: str, **options: Any) -> TopicContract:
        fmt = AvroFormat(schema=json.dumps(ORDER_V1), registry_url=proxy.url)
        return TopicContract(topic=topic, model=Order, owner="shop", payload_format=fmt, **options)

    runtime = Hopchain(
        ContractRegistry([contract(source, adopt_bare=True), contract(shipped)]), component="ship"
    )
    group = unique_topic_name("ship")
    middleware = HopchainMiddleware(runtime, group=group, registry_backoff=RegistryBackoff())
    # No line per record from FastStream: writing them would be most of the bench's work.
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK, logger=None)
    run = Stage(broker, middleware, group)

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(shipped)
    async def ship(order: Order) -> Order:
        if run.up_at and run.first_after is None:
            run.first_after = time.monotonic() - run.up_at
        run.handled.append(order.order_id)
        return order

    return run


@dataclass
class Outage:
    """What the outage did."""

    cached_done: float = 0.0
    """Seconds into the outage when the records of the cached schema id were all handled."""
    handled_during: int = 0
    passed_early: int = 0
    """Checks that found an offset committed past a record waiting for the registry."""


async def sit_out(
    run: Stage, admin: AIOKafkaAdminClient, source: str, waiting_from: dict[int, int], **at: float
) -> Outage:
    """Watch the stage once a second until the outage is over."""
    seen = Outage()
    while time.monotonic() - at["down_at"] < at["outage"]:
        if not seen.cached_done and len(run.handled) >= at["readable"]:
            seen.cached_done = time.monotonic() - at["down_at"]
        now = await committed(admin, run.group, source)
        seen.passed_early += sum(1 for p, o in now.items() if o > waiting_from.get(p, o))
        await asyncio.sleep(1.0)
    seen.handled_during = len(run.handled)
    return seen


async def measure(bootstrap: str, url: str, records: int, outage: float, partitions: int) -> None:
    source, shipped = unique_topic_name("orders"), unique_topic_name("shipped")
    await create_topics(bootstrap, source, partitions=partitions)
    await create_topics(bootstrap, shipped, f"{source}.dlq", f"{shipped}.dlq")
    half, quarter = records // 2, records // 4
    known = frames(url, source, ORDER_V1, range(half))
    unseen = frames(url, source, ORDER_V2, range(half, records))
    pauses = Pauses()
    hopchain_logger = logging.getLogger("hopchain")
    hopchain_logger.addHandler(pauses)
    hopchain_logger.setLevel(logging.WARNING)  # its pause lines, whatever the root's level
    proxy = DownableRegistry(url)
    run = stage(bootstrap, proxy, source, shipped)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await producer.start()
    await admin.start()
    try:
        await send(producer, source, known[:quarter], 0, partitions)
        await run.broker.start()
        await until(lambda: len(run.handled) == quarter, 300, "the records before the outage")
        proxy.down = True
        down_at = time.monotonic()
        await send(producer, source, known[quarter:], quarter, partitions)
        waiting_from: dict[int, int] = {}
        for partition, offset in await send(producer, source, unseen, half, partitions):
            waiting_from[partition] = min(waiting_from.get(partition, offset), offset)
        seen = await sit_out(
            run, admin, source, waiting_from, down_at=down_at, outage=outage, readable=half
        )
        proxy.down = False
        run.up_at = time.monotonic()
        target = await ends(bootstrap, source, partitions)
        await until(lambda: _all_at(admin, run.group, source, target), 600, "catching up")
        caught_up = time.monotonic() - run.up_at
    finally:
        await run.middleware.close()
        await run.broker.stop()
        await producer.stop()
        await admin.close()
        proxy.close()
    counts = Counter(run.handled)
    lengths = [round(p, 2) for t, p in pauses.seen if t < run.up_at]
    first_pause = min((t for t, _ in pauses.seen), default=run.up_at)
    summary = {
        "records": records,
        "partitions": partitions,
        "outage_s": outage,
        "cached_read_on": half - quarter,
        "cached_done_s": round(seen.cached_done, 3),
        "handled_while_down": seen.handled_during,
        "waited_s": round(run.up_at - first_pause, 3),
        "pauses": len(lengths),
        "pause_lengths_s": lengths,
        "longest_pause_s": max(lengths, default=0.0),
        "first_after_s": round(run.first_after or 0.0, 3),
        "caught_up_s": round(caught_up, 3),
        "lost": records - len(counts),
        "duplicates": sum(count - 1 for count in counts.values()),
        "dead_lettered": sum((await ends(bootstrap, f"{source}.dlq", 1)).values()),
        "committed_past_waiting": seen.passed_early,
    }
    report(summary)


def report(summary: dict[str, Any]) -> None:
    say(
        f"records {summary['records']} over {summary['partitions']} partition(s); registry "
        f"down {summary['outage_s']:.0f} s"
    )
    say(
        f"cached schema id read on while down: {summary['cached_read_on']} records, done "
        f"{summary['cached_done_s']:.2f} s into the outage; handled while down: "
        f"{summary['handled_while_down']}"
    )
    say(
        f"the first record of the unseen schema waited {summary['waited_s']:.1f} s; pauses "
        f"while down: {summary['pauses']}, lengths (s): {summary['pause_lengths_s']}"
    )
    say(
        f"after the registry answered: first waiting record handled in "
        f"{summary['first_after_s']:.2f} s, all committed in {summary['caught_up_s']:.2f} s"
    )
    say(
        f"lost {summary['lost']}, handled twice {summary['duplicates']}, dead-lettered "
        f"{summary['dead_lettered']}, offsets past a waiting record while down: "
        f"{summary['committed_past_waiting']}"
    )
    say(json.dumps(summary))


async def _all_at(
    admin: AIOKafkaAdminClient, group: str, topic: str, target: dict[int, int]
) -> bool:
    now = await committed(admin, group, topic)
    return all(now.get(p) == end for p, end in target.items() if end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP"))
    parser.add_argument("--registry", default=os.environ.get("HOPCHAIN_SCHEMA_REGISTRY_URL"))
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=3)
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with ExitStack() as services:
        bootstrap = arguments.bootstrap or services.enter_context(LocalKafka()).bootstrap
        url = arguments.registry or services.enter_context(LocalRegistry()).url
        asyncio.run(
            measure(bootstrap, url, arguments.records, arguments.outage, arguments.partitions)
        )


if __name__ == "__main__":
    main()
