"""A pipeline of mixed envelope schemas on the real broker: a schema-1 writer, schema-2 stages.

``ingest`` still writes schema 1 (a service not yet upgraded); ``enrich`` reads it with the
default codec and writes schema 2, carrying the schema-1 hop over inside the identity;
``audit`` reads schema 2. Every hop is signed; every reader holds the keys.
"""

from __future__ import annotations

import json
import os
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from reliability_support import wait_until

import hopchain.middleware.engine.publish as publish_module
from hopchain import Hopchain, HopchainMiddleware, current_hop, origin
from hopchain.exceptions import EnvelopeError, ReasonCode
from hopchain.schemas import (
    ENVELOPE_HEADER,
    ContractRegistry,
    EnvelopeCodec,
    Keyring,
    TopicContract,
    load_envelope,
    new_envelope,
    verify_chain,
)
from hopchain.testing import read_to_end

if TYPE_CHECKING:
    from hopchain.testing import TopicFactory


class Claim(BaseModel):
    number: int
    amount_cents: int


@pytest.mark.kafka
async def test_a_schema_1_chain_continued_by_schema_2_stages_verifies_end_to_end(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring = Keyring({name: os.urandom(32) for name in ("ingest", "enrich")})
    claims, enriched = await new_topic(prefix="claims"), await new_topic(prefix="enriched")
    registry = ContractRegistry(
        [
            TopicContract(topic=claims, model=Claim, owner="intake"),
            TopicContract(topic=enriched, model=Claim, owner="audit-team"),
        ]
    )
    # ingest is not upgraded yet: it mints and writes schema-1 envelopes.
    old = Hopchain(
        registry,
        component="ingest",
        keyring=keyring,
        codec=EnvelopeCodec(registry, keyring=keyring, schema=1),
    )
    monkeypatch.setattr(publish_module, "new_envelope", partial(new_envelope, schema=1))
    ingest = KafkaBroker(kafka_bootstrap, middlewares=[HopchainMiddleware(old)])
    enrich = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(registry, component="enrich", keyring=keyring))],
        ack_policy=AckPolicy.ACK,
    )
    audit = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(registry, component="audit", keyring=keyring))],
        ack_policy=AckPolicy.ACK,
    )
    seen: list[Any] = []

    @enrich.subscriber(claims, group_id="enrich", auto_offset_reset="earliest")
    @enrich.publisher(enriched)
    async def add_nothing(claim: Claim) -> Claim:
        return claim

    @audit.subscriber(enriched, group_id="audit", auto_offset_reset="earliest")
    async def check(claim: Claim) -> None:
        hop = current_hop()
        assert hop is not None
        seen.append((claim, hop.envelope))

    for broker in (ingest, enrich, audit):
        await broker.start()
    try:
        with origin(run_id="mixed", work_item_id="claim-1"):
            await ingest.publish(Claim(number=1, amount_cents=12_300), claims)
        monkeypatch.undo()

        async def audited() -> bool:
            return len(seen) == 1

        await wait_until(audited, within=60, what="the audited claim", every=0.2)
    finally:
        for broker in (audit, enrich, ingest):
            await broker.stop()

    [first] = await read_to_end(kafka_bootstrap, [claims])
    [second] = await read_to_end(kafka_bootstrap, [enriched])
    written_by_ingest = json.loads(dict(first.headers)[ENVELOPE_HEADER])
    assert written_by_ingest["schema_version"] == "1.0"
    text = dict(second.headers)[ENVELOPE_HEADER]
    carried = load_envelope(text, keyring=keyring)
    assert carried.schema_version == "2.0"
    assert [hop.component for hop in carried.chain] == ["ingest", "enrich"]
    assert carried.chain[0].digest == written_by_ingest["chain"][0]["digest"]
    assert carried.chain[0].signature == written_by_ingest["chain"][0]["signature"]
    assert carried.chain[1].signature is not None
    verify_chain(carried, keyring)
    claim, envelope = seen[0]
    assert claim == Claim(number=1, amount_cents=12_300)
    assert [hop.component for hop in envelope.chain] == ["ingest", "enrich"]
    # The schema-1 hop is covered by the schema-2 digests: editing it is caught.
    edited = text.replace(b'"component":"ingest"', b'"component":"ingesT"', 1)
    assert edited != text
    with pytest.raises(EnvelopeError) as refused:
        load_envelope(edited, keyring=keyring)
    assert (refused.value.code, refused.value.path) == (ReasonCode.BAD_DIGEST, "$.chain[0].digest")
