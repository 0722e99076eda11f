"""A stage whose effect fails inside its transaction, on real Kafka and a real PostgreSQL.

The first attempt writes its ledger row, then fails with a transient error: the row and the
stage key roll back together. The stage's transport retry runs the effect again, and it
commits. The output's hop names the row the retry wrote, and no trace of the first attempt
is left in the database.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from stage_worker import STAGE_NAME, Claim, Filed, registry

from hopchain import Hopchain, HopchainMiddleware, Transient, current_hop, origin
from hopchain.middleware.dedupe_postgres import EffectTransaction, PostgresDedupeStore
from hopchain.middleware.policy import Backoff, TransportRetry
from hopchain.middleware.stage import Stage
from hopchain.schemas import Decision, EffectKind, EnvelopeCodec
from hopchain.schemas.ids import stage_intent_key
from hopchain.testing import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

LEDGER = "CREATE TABLE ledger (id bigserial PRIMARY KEY, claim_id text NOT NULL)"


async def first_record(bootstrap: str, topic: str) -> Any:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        async with asyncio.timeout(60):
            return await consumer.getone()
    finally:
        await consumer.stop()


async def test_an_effect_rolled_back_by_a_failed_attempt_leaves_no_key_and_the_retry_commits(
    kafka_bootstrap: str, postgres_dsn: str, new_topic: TopicFactory
) -> None:
    input_topic, output_topic = await new_topic(prefix="to-file"), await new_topic(prefix="filed")
    contracts = registry(input_topic, output_topic)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as db:
        await db.execute(LEDGER)
    store = await PostgresDedupeStore(postgres_dsn).open()
    stage = Stage(
        name=STAGE_NAME,
        input=input_topic,
        output=output_topic,
        owner="claims-ops",
        side_effects_free=False,
        idempotent=True,
        transport=TransportRetry(retries=2, backoff=Backoff(initial=0.05, maximum=0.05)),
    )
    broker = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(contracts, component="filer", dedupe=store))],
        ack_policy=AckPolicy.ACK,
    )
    attempts: list[str] = []

    async def file_claim(claim: Claim) -> Filed:
        hop = current_hop()
        assert hop is not None

        async def write(tx: EffectTransaction) -> str:
            cursor = await tx.connection.execute(
                "INSERT INTO ledger (claim_id) VALUES (%s) RETURNING id", (claim.claim_id,)
            )
            row = await cursor.fetchone()
            assert row is not None
            attempts.append(f"row-{row[0]}")
            if len(attempts) == 1:
                raise Transient("the ledger's replica lagged; try again")
            return f"row-{row[0]}"

        effect = await store.once(hop, EffectKind.RECORD_WRITTEN, "ledger", write)
        return Filed(claim_id=claim.claim_id, ledger_row=effect.identifier)

    broker.subscriber(
        input_topic, group_id=f"filer-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest"
    )(broker.publisher(output_topic)(stage(file_claim)))
    intent = f"intent-{uuid.uuid4().hex}"
    await broker.start()
    try:
        with origin(run_id="run-rollback", work_item_id="claim-1", intent_key=intent):
            await broker.publish(Claim(claim_id="claim-1", amount_cents=100), input_topic)
        output = await first_record(kafka_bootstrap, output_topic)
    finally:
        await broker.stop()
        await store.close()

    # Two runs of the effect; the first one's row (row-1) rolled back with its key.
    assert attempts == ["row-1", "row-2"]
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as db:
        ledger = await (await db.execute("SELECT id, claim_id FROM ledger")).fetchall()
        entries = await (
            await db.execute("SELECT key, identifier FROM hopchain_effects")
        ).fetchall()
    assert ledger == [(2, "claim-1")]
    assert entries == [(stage_intent_key(intent, STAGE_NAME), "row-2")]

    decoded = EnvelopeCodec(contracts).decode(output.topic, output.value, list(output.headers))
    assert decoded.payload == Filed(claim_id="claim-1", ledger_row="row-2")
    hop = decoded.envelope.chain[-1]
    assert hop.decision is Decision.RECOVERED
    assert [(a.kind.value, a.outcome.value) for a in hop.attempts] == [
        ("first", "failed"),
        ("transport", "succeeded"),
    ]
    assert [(e.kind, e.target, e.identifier) for e in hop.effects] == [
        (EffectKind.RECORD_WRITTEN, "ledger", "row-2")
    ]
