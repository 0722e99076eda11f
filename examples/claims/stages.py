"""The four stage services of the claims pipeline; each runs as its own process.

    python -m examples.claims.stages extract --bootstrap 127.0.0.1:9092 --run-dir RUN

intake reads Avro through a schema registry: it needs ``HOPCHAIN_SCHEMA_REGISTRY_URL``.

The "model" behind extract and classify is simulated: documents carry markers that make it
misbehave the way real models and dependencies do (see ``feeder.py``). Everything hopchain
does with those failures is real: validation, retries with feedback, backoff, degradation,
dead letters, idempotent filing, and the hop chain.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import re
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from faststream.kafka import KafkaBroker

from examples.claims.pipeline import (
    CLASSIFIED,
    DOCUMENTS,
    EXTRACTED,
    FILED,
    PARTNER,
    Classified,
    Document,
    Extracted,
    Filed,
    PartnerClaim,
    classify,
    extract,
    file_claim,
    intake,
    registry,
)
from hopchain import (
    EnvironmentFailure,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    RejectedInput,
    current_hop,
)
from hopchain.middleware.dedupe import SqliteDedupeStore
from hopchain.schemas import AttemptKind, EffectKind
from hopchain.telemetry import configure_tracing

_FIELD = re.compile(r"(?P<name>claimant|policy|amount|about): (?P<value>[^;]+)")
RATE_LIMITED_CALLS = 2
"""How many calls the rate-limited model service refuses before it answers."""
_CATEGORIES = {"car": "auto", "house": "home", "clinic": "health", "flight": "travel"}


class TooManyRequestsError(Exception):
    """What the simulated model service raises when it is rate limited."""

    status_code = 429


def _fields(text: str) -> dict[str, str]:
    return {m["name"]: m["value"].strip() for m in _FIELD.finditer(text)}


def _transport_retries() -> int:
    hop = current_hop()
    return 0 if hop is None else sum(a.kind is AttemptKind.TRANSPORT for a in hop.attempts)


async def run_intake(claim: PartnerClaim) -> Document:
    """A partner's claim as the pipeline's document (its Avro record read by the contract)."""
    return Document(doc_id=claim.reference, text=claim.narrative)


async def run_extract(doc: Document) -> dict[str, Any]:
    """Ask the (simulated) extraction model for the claim's fields."""
    hop = current_hop()
    if "[transient]" in doc.text and _transport_retries() < RATE_LIMITED_CALLS - 1:
        raise TooManyRequestsError
    found = _fields(doc.text)
    output: dict[str, Any] = {
        "doc_id": doc.doc_id,
        "claimant": found.get("claimant", ""),
        "policy_number": found.get("policy", ""),
        "amount_cents": int(float(found.get("amount", "0")) * 100),
        "summary": found.get("about", "")[:500],
    }
    if "[format]" in doc.text and (hop is None or hop.feedback is None):
        output["amount_cents"] = found.get("amount", "")  # the model answered in prose
    if "[comprehension]" in doc.text:
        output["policy_number"] = "the one on the letterhead"  # no retry makes it read
    return output


async def run_classify(claim: Extracted) -> dict[str, Any]:
    """Ask the (simulated) classifier for the line of business."""
    if "[ambiguous]" in claim.summary:
        return {**claim.model_dump(), "category": "probably-auto-or-home"}
    word = next((w for w in _CATEGORIES if w in claim.summary), "car")
    return {**claim.model_dump(), "category": _CATEGORIES[word]}


class Ledger:
    """The claims ledger: a table that refuses a second entry for one idempotency key."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS entries (idempotency_key TEXT PRIMARY KEY, "
            "entry TEXT NOT NULL, doc_id TEXT NOT NULL, category TEXT NOT NULL)"
        )

    def write(self, key: str, claim: Classified) -> str:
        """Write the entry once; a second call with the same key returns the first entry."""
        entry = "L-" + hashlib.sha256(key.encode()).hexdigest()[:16]
        self._db.execute(
            "INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)",
            (key, entry, claim.doc_id, claim.category),
        )
        return entry


def build(stage: str, bootstrap: str, run_dir: Path) -> tuple[KafkaBroker, HopchainMiddleware]:
    """The broker of one stage service, with hopchain installed and its handler declared."""
    dedupe = SqliteDedupeStore(run_dir / f"{stage}-dedupe.sqlite") if stage == "file" else None
    runtime = Hopchain(
        registry,
        component=stage,
        dedupe=dedupe,
        config=HopchainConfig(kafka_bootstrap=bootstrap),
    )
    middleware = HopchainMiddleware(runtime, group=f"claims-{stage}")
    broker = KafkaBroker(
        # FastStream reads a string as one address; a cluster's "a:1,b:2" needs a list.
        bootstrap.split(","),
        middlewares=[middleware],
        # AckPolicy.ACK, or MANUAL when hopchain commits in batches (HOPCHAIN_COMMITS).
        ack_policy=middleware.ack_policy,
        # Outputs survive the loss of a partition leader only if the replicas have them too
        # (check() would set these; said here for the reader).
        acks="all",
        enable_idempotence=True,
        logger=logging.getLogger(f"claims.{stage}"),
    )
    if stage == "intake":
        broker.subscriber(
            PARTNER,
            group_id="claims-intake",
            auto_offset_reset="earliest",
            listener=middleware.listener(),
        )(broker.publisher(DOCUMENTS)(intake(run_intake)))
    elif stage == "extract":
        broker.subscriber(
            DOCUMENTS,
            group_id="claims-extract",
            auto_offset_reset="earliest",
            listener=middleware.listener(),
        )(broker.publisher(EXTRACTED)(extract(run_extract)))
    elif stage == "classify":
        broker.subscriber(
            EXTRACTED,
            group_id="claims-classify",
            auto_offset_reset="earliest",
            listener=middleware.listener(),
        )(broker.publisher(CLASSIFIED)(classify(run_classify)))
    elif stage == "file":
        ledger = Ledger(run_dir / "ledger.sqlite")

        async def run_file(claim: Classified) -> Filed:
            hop = current_hop()
            if hop is None:  # pragma: no cover - the middleware always sets it
                raise EnvironmentFailure("filing ran outside hopchain")
            if "[unfileable]" in claim.summary:
                raise RejectedInput(
                    "the ledger has no open policy with this number",
                    recovery_hint="check the policy number with the claimant",
                )

            async def write(key: str) -> str:
                return ledger.write(key, claim)

            effect = await hop.once(EffectKind.RECORD_WRITTEN, "ledger.entries", write)
            return Filed(
                doc_id=claim.doc_id, ledger_entry=effect.identifier, category=claim.category
            )

        broker.subscriber(
            CLASSIFIED,
            group_id="claims-file",
            auto_offset_reset="earliest",
            listener=middleware.listener(),
        )(broker.publisher(FILED)(file_claim(run_file)))
    else:
        msg = f"unknown stage {stage!r}; choose intake, extract, classify or file"
        raise SystemExit(msg)
    middleware.check(broker)
    return broker, middleware


async def serve(stage: str, bootstrap: str, run_dir: Path) -> int:
    """Run one stage until SIGTERM/SIGINT (exit 0) or until it aborts (exit 3)."""
    broker, middleware = build(stage, bootstrap, run_dir)
    runtime = middleware.hopchain
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # From here a SIGTERM is a clean stop: say so to whoever supervises the process.
    ready = run_dir / "ready"
    ready.mkdir(parents=True, exist_ok=True)
    (ready / str(os.getpid())).touch()
    await broker.start()
    stopped = asyncio.create_task(stop.wait())
    aborted = asyncio.create_task(runtime.aborted.wait())
    await asyncio.wait({stopped, aborted}, return_when=asyncio.FIRST_COMPLETED)
    await middleware.close()  # commits what is settled while the consumers still run
    await broker.stop()
    for task in (stopped, aborted):
        task.cancel()
    if runtime.aborted.is_set():
        logging.getLogger("claims").critical("%s", runtime.aborted.reason)
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of one stage service."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("stage", choices=["intake", "extract", "classify", "file"])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--run-dir", type=Path, required=True, help="where to keep state")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    configure_tracing(f"claims-{args.stage}")
    return asyncio.run(serve(args.stage, args.bootstrap, args.run_dir))


if __name__ == "__main__":
    sys.exit(main())
