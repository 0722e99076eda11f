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
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer
from faststream.kafka import KafkaBroker

from examples.claims.pipeline import DOCUMENTS, Document, registry
from hopchain import Hopchain, HopchainMiddleware, origin

SCENARIOS = ("clean", "format", "comprehension", "transient", "ambiguous", "unfileable", "legacy")

DEFAULT_RATES: Mapping[str, float] = {
    "format": 0.10,
    "comprehension": 0.04,
    "transient": 0.08,
    "ambiguous": 0.06,
    "unfileable": 0.03,
    "legacy": 0.04,
}

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
) -> FeedReport:
    """Send ``count`` documents, numbered from ``first``; return what was sent."""
    rng = random.Random(seed)
    report = FeedReport(run_id=run_id)
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
    return report
