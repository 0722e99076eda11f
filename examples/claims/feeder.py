"""Synthetic claim documents with controllable rates of the faults real pipelines meet.

Each document is one scenario:

- ``clean``: every stage succeeds first time.
- ``format``: the extractor answers in the wrong format once; a contract retry fixes it.
- ``comprehension``: the extractor cannot read the policy number; retries do not help,
  the record is dead-lettered to the extraction team.
- ``transient``: the extraction service answers 429 twice; backoff and retry fix it.
- ``ambiguous``: the classifier gives no valid category; the claim is filed as ``unknown``.
- ``unfileable``: the ledger has no such policy; dead-lettered to claims operations.
- ``legacy``: a record from an old producer that does not use hopchain (no envelope, or
  garbage); rejected at the extractor's boundary and parked for the intake team.
- ``partner``: a clean claim sent by the partner's portal, a producer that knows nothing of
  hopchain, as Avro framed by confluent-kafka's own ``AvroSerializer``; intake adopts it and
  hands it on. Halfway through the run the partner releases schema version 2, which renames
  ``narrative`` to ``statement`` (its subject's compatibility is ``NONE``, so the registry
  takes it): those claims are counted as ``partner_v2``, and intake, whose reader schema
  needs ``narrative``, parks each of them as ``unresolvable_schema``. Off unless the rates
  give it a share (it needs a schema registry).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream.kafka import KafkaBroker

from examples.claims.pipeline import DOCUMENTS, PARTNER, PARTNER_SCHEMA, Document, registry
from hopchain import Hopchain, HopchainMiddleware, origin

SCENARIOS = (
    "clean",
    "format",
    "comprehension",
    "transient",
    "ambiguous",
    "unfileable",
    "legacy",
    "partner",
)

DEFAULT_RATES: Mapping[str, float] = {
    "format": 0.10,
    "comprehension": 0.04,
    "transient": 0.08,
    "ambiguous": 0.06,
    "unfileable": 0.03,
    "legacy": 0.04,
}

DEMO_RATES: Mapping[str, float] = {**DEFAULT_RATES, "partner": 0.10}
"""What ``make demo`` sends: the default faults, and a share of claims from the partner."""

PARTNER_SCHEMA_V2: dict[str, Any] = {
    **PARTNER_SCHEMA,
    "fields": [
        {"name": "reference", "type": "string"},
        {"name": "statement", "type": "string"},
    ],
}
"""The partner's second schema version: ``narrative`` renamed, which no v1 reader resolves."""

LEGACY_JSON_SHARE = 0.5
"""Of the legacy records, the share that are JSON without an envelope (the rest: garbage)."""

_CLAIMANTS = ("Ada Byron", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov")
_ABOUT = ("car", "house", "clinic", "flight")


@dataclass
class FeedReport:
    """What was sent, by scenario, and the work item id of each document."""

    run_id: str
    scenarios: Counter[str] = field(default_factory=Counter)
    work_items: dict[str, str] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        """Records sent in all."""
        return sum(self.scenarios.values())


def choose(rng: random.Random, rates: Mapping[str, float]) -> str:
    """Draw a scenario; whatever the rates leave over is ``clean``."""
    draw = rng.random()
    for name in SCENARIOS:
        rate = rates.get(name, 0.0)
        if draw < rate:
            return name
        draw -= rate
    return "clean"


def document(rng: random.Random, doc_id: str, scenario: str) -> Document:
    """A claim document whose text makes the simulated services behave as ``scenario``."""
    about = rng.choice(_ABOUT)
    if scenario == "ambiguous":
        about = "[ambiguous] " + about
    if scenario == "unfileable":
        about = "[unfileable] " + about
    marker = f"[{scenario}] " if scenario in {"format", "comprehension", "transient"} else ""
    text = (
        f"{marker}claimant: {rng.choice(_CLAIMANTS)}; policy: POL-{rng.randrange(10**6):06d}; "
        f"amount: {rng.randrange(100, 500_000) / 100:.2f}; about: damage to a {about}"
    )
    return Document(doc_id=doc_id, text=text)


class PartnerPortal:
    """The partner's producer: Avro framed by confluent-kafka's serializer, no hopchain.

    It registers its schemas itself (the serializer's default), under a subject whose
    compatibility it set to ``NONE``: the registry accepts any new version.
    """

    def __init__(self, registry_url: str) -> None:
        self._client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
        self._subject = f"{PARTNER}-value"
        self._client.set_compatibility(subject_name=self._subject, level="NONE")
        self._context = SerializationContext(PARTNER, MessageField.VALUE)
        self._writers = {
            1: AvroSerializer(self._client, json.dumps(PARTNER_SCHEMA)),
            2: AvroSerializer(self._client, json.dumps(PARTNER_SCHEMA_V2)),
        }

    def frame(self, version: int, doc: Document) -> bytes:
        """The claim as the partner's schema ``version`` writes it."""
        text = "narrative" if version == 1 else "statement"
        record = {"reference": doc.doc_id, text: doc.text}
        framed: bytes | None = self._writers[version](record, self._context)
        if framed is None:  # pragma: no cover - only None is serialized as None
            raise ValueError("the serializer wrote nothing")
        return framed

    def close(self) -> None:
        """Close the registry client's connections."""
        self._client.close()


def _legacy_record(rng: random.Random, doc_id: str) -> bytes:
    if rng.random() < LEGACY_JSON_SHARE:
        return f'{{"doc_id": "{doc_id}", "body": "scanned fax"}}'.encode()
    return bytes(rng.randrange(256) for _ in range(rng.randrange(8, 64)))


async def feed(
    bootstrap: str,
    count: int,
    *,
    run_id: str,
    rates: Mapping[str, float] = DEFAULT_RATES,
    seed: int = 7,
    on_sent: Callable[[], None] | None = None,
    first: int = 0,
    registry_url: str | None = None,
) -> FeedReport:
    """Send ``count`` documents, numbered from ``first``; return what was sent.

    ``partner`` claims (when ``rates`` give them a share) need ``registry_url``; from the
    middle of the run on they are written with the partner's schema version 2.
    """
    rng = random.Random(seed)
    report = FeedReport(run_id=run_id)
    portal = None
    if rates.get("partner", 0.0) > 0:
        if registry_url is None:
            raise ValueError("partner claims are Avro: give the schema registry's registry_url")
        portal = PartnerPortal(registry_url)
    switch = first + count // 2
    broker = KafkaBroker(
        # FastStream reads a string as one address; a cluster's "a:1,b:2" needs a list.
        bootstrap.split(","),
        middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))],
        acks="all",
        enable_idempotence=True,
    )
    legacy = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await broker.start()
    await legacy.start()
    try:
        for number in range(first, first + count):
            doc_id = f"doc-{number:05d}"
            scenario = choose(rng, rates)
            if scenario == "legacy":
                await legacy.send_and_wait(DOCUMENTS, _legacy_record(rng, doc_id))
            elif scenario == "partner" and portal is not None:
                version = 1 if number < switch else 2
                framed = portal.frame(version, document(rng, doc_id, "clean"))
                await legacy.send_and_wait(PARTNER, framed, key=doc_id.encode())
                scenario = "partner" if version == 1 else "partner_v2"
            else:
                with origin(run_id=run_id, work_item_id=doc_id):
                    await broker.publish(document(rng, doc_id, scenario), DOCUMENTS)
            report.scenarios[scenario] += 1
            report.work_items[doc_id] = scenario
            if on_sent is not None:
                on_sent()
    finally:
        await legacy.stop()
        await broker.stop()
        if portal is not None:
            portal.close()
    return report
