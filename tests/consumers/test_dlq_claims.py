"""Redrive duplicates and resolution forgery, on the real broker.

Two triage instances racing on the same letters send each once; a tombstone does not reopen
a redriven letter; with a resolution key, unsigned and forged resolutions are ignored and
counted; a 3 MB dead letter is redriven when the triage producer's request size allows it.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaProducer
from dlq_helpers import (
    SettingsFactory,
    call,
    read_topic,
    report_figure,
    scrape,
    settings_factory,
    wait_until,
)

from hopchain.consumers import DeadLetterService, load_index
from hopchain.consumers.errors import TriageError, TriageRefused
from hopchain.consumers.resolutions import (
    SIGNATURE_HEADER,
    Resolution,
    ResolutionKind,
    encode_resolution,
    is_clock_probe,
)
from hopchain.consumers.topics import DEAD_LETTER_TOPIC_CONFIG
from hopchain.consumers.triage import Redriven, Triage
from hopchain.testing import create_topics
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    produce_dead_letters,
    synthetic_dead_letter,
)

if TYPE_CHECKING:
    from hopchain.consumers import DlqSettings
    from hopchain.testing import TopicFactory


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


def letters_for(source: str, count: int, value: bytes = b'{"n": 1}') -> list[SyntheticDeadLetter]:
    now = time.time()
    return [
        synthetic_dead_letter(
            owner="billing",
            source_topic=source,
            parked_at=now - 60 + n,
            value=value,
            key=f"order-{n}".encode(),
            source_offset=n,
        )
        for n in range(count)
    ]


async def started_triage(settings: DlqSettings) -> Triage:
    """A triage instance as a CLI makes one: its own rebuilt index, its own clients."""
    snapshot = await load_index(settings, timeout=60)
    triage = Triage(settings, snapshot.index)
    await triage.start()
    return triage


def new_key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


@pytest.mark.kafka
async def test_two_triage_instances_racing_on_three_letters_send_each_exactly_once(
    dlq_settings: SettingsFactory,
    new_topic: TopicFactory,
    kafka_bootstrap: str,
    pytestconfig: pytest.Config,
) -> None:
    source = await new_topic()
    dead_letter_topic = await new_topic(prefix=f"{source}-dlq")
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})
    letters = letters_for(source, 3)
    await produce_dead_letters(kafka_bootstrap, dead_letter_topic, letters)
    first, second = await started_triage(settings), await started_triage(settings)
    try:
        started = time.monotonic()
        outcomes = await asyncio.gather(
            *(
                triage.redrive(letter.dead_letter_id, who=who, reason="race")
                for letter in letters
                for triage, who in ((first, "alice"), (second, "bob"))
            ),
            return_exceptions=True,
        )
        seconds = time.monotonic() - started
    finally:
        await first.stop()
        await second.stop()

    redriven = [outcome for outcome in outcomes if isinstance(outcome, Redriven)]
    refused = [outcome for outcome in outcomes if isinstance(outcome, TriageRefused)]
    assert (len(redriven), len(refused)) == (3, 3), outcomes
    assert sorted(r.resolution.dead_letter_id for r in redriven) == sorted(
        letter.dead_letter_id for letter in letters
    )
    assert all("another process" in str(r) or "already redriven" in str(r) for r in refused)
    downstream = await read_topic(kafka_bootstrap, source)
    assert len(downstream) == 3
    assert sorted(record.key for record in downstream) == [b"order-0", b"order-1", b"order-2"]
    assert seconds < 30
    report_figure(
        pytestconfig,
        f"two triage instances, 3 letters, 6 redrives at once: {len(redriven)} sent, "
        f"{len(refused)} refused, {len(downstream)} records downstream, {seconds:.2f} s",
    )

    rebuilt = await load_index(settings, timeout=60)
    assert rebuilt.index.counts() == {"dead_letters": 3, "unresolved": 0, "resolutions": 3}


@pytest.mark.kafka
async def test_two_service_replicas_asked_to_redrive_the_same_letters_send_each_once(
    dlq_settings: SettingsFactory,
    new_topic: TopicFactory,
    kafka_bootstrap: str,
    pytestconfig: pytest.Config,
) -> None:
    source = await new_topic()
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "billing"}, dlq_token=token)
    letters = letters_for(source, 3)
    async with DeadLetterService(settings) as one, DeadLetterService(settings) as two:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", letters)
        for replica in (one, two):
            await replica.wait_ready(60)
        await wait_until(
            lambda: len(one.index) == len(two.index) == len(letters), what="both indexes"
        )
        body = {"who": "alice", "reason": "fixed"}
        started = time.monotonic()
        statuses = await asyncio.gather(
            *(
                asyncio.to_thread(
                    call,
                    "POST",
                    f"{replica.url}/dead-letters/{letter.dead_letter_id}/redrive",
                    body,
                    token,
                )
                for letter in letters
                for replica in (one, two)
            )
        )
        seconds = time.monotonic() - started
    codes = sorted(status for status, _ in statuses)
    assert codes == [200, 200, 200, 409, 409, 409], statuses
    downstream = await read_topic(kafka_bootstrap, source)
    assert len(downstream) == 3
    report_figure(
        pytestconfig,
        f"two service replicas, 3 letters, 6 HTTP redrives at once: {codes.count(200)} sent, "
        f"{codes.count(409)} refused (409), {len(downstream)} records downstream, "
        f"{seconds:.2f} s",
    )


@pytest.mark.kafka
async def test_a_tombstone_does_not_reopen_a_redriven_letter(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    source = await new_topic()
    dead_letter_topic = await new_topic(prefix=f"{source}-dlq")
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})
    [letter] = letters_for(source, 1)
    await produce_dead_letters(kafka_bootstrap, dead_letter_topic, [letter])
    triage = await started_triage(settings)
    try:
        await triage.redrive(letter.dead_letter_id, who="alice", reason="fixed")
    finally:
        await triage.stop()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.dlq_resolutions_topic, None, key=letter.dead_letter_id.encode()
        )
    finally:
        await producer.stop()

    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        assert service.index.counts()["unresolved"] == 0
        found = service.index.get(letter.dead_letter_id)
        assert found is not None
        assert found[1] is not None
        assert found[1].resolution is ResolutionKind.REDRIVEN
        ignored = (await asyncio.to_thread(scrape, service.url))[
            "hopchain_dlq_resolutions_ignored_total"
        ]
        assert ignored == {(("reason", "tombstone"),): 1.0}
    again = await started_triage(settings)
    try:
        with pytest.raises(TriageRefused, match="already redriven by alice"):
            await again.redrive(letter.dead_letter_id, who="bob", reason="reopened?")
    finally:
        await again.stop()
    assert len(await read_topic(kafka_bootstrap, source)) == 1


@pytest.mark.kafka
async def test_with_a_resolution_key_unsigned_and_forged_resolutions_are_ignored_and_counted(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    source = await new_topic()
    dead_letter_topic = await new_topic(prefix=f"{source}-dlq")
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"}, dlq_resolution_key=new_key())
    unsigned, forged, genuine = letters_for(source, 3)
    await produce_dead_letters(kafka_bootstrap, dead_letter_topic, [unsigned, forged, genuine])

    def discarded(letter: SyntheticDeadLetter, offset: int) -> Resolution:
        return Resolution(
            dead_letter_id=letter.dead_letter_id,
            resolution=ResolutionKind.DISCARDED,
            who="mallory",
            at=datetime.now(UTC),
            reason="hide it from the alerts",
            dead_letter_topic=dead_letter_topic,
            partition=0,
            offset=offset,
        )

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for item, key in ((discarded(unsigned, 0), None), (discarded(forged, 1), new_key())):
            signing = base64.b64decode(key) if key is not None else None
            record_key, value, headers = encode_resolution(item, signing)
            await producer.send_and_wait(
                settings.dlq_resolutions_topic, value, key=record_key, headers=headers
            )
    finally:
        await producer.stop()
    triage = await started_triage(settings)
    try:
        await triage.discard(genuine.dead_letter_id, who="alice", reason="duplicate order")
    finally:
        await triage.stop()

    async with DeadLetterService(settings) as service:
        await service.wait_ready(60)
        open_ids = {letter.dead_letter_id for letter, _ in service.index.select()}
        assert open_ids == {unsigned.dead_letter_id, forged.dead_letter_id}
        ignored = (await asyncio.to_thread(scrape, service.url))[
            "hopchain_dlq_resolutions_ignored_total"
        ]
        assert ignored == {(("reason", "unsigned"),): 1.0, (("reason", "bad_signature"),): 1.0}
    # Without the service's clock probes (unsigned tombstones that resolve nothing).
    stored = [
        record
        for record in await read_topic(kafka_bootstrap, settings.dlq_resolutions_topic)
        if not is_clock_probe(record.headers)
    ]
    signed = [r for r in stored if any(name == SIGNATURE_HEADER for name, _ in r.headers)]
    assert len(stored) == 4  # the two forgeries, alice's claim and her resolution
    assert len(signed) == 3  # alice's, and the one signed with another key


@pytest.mark.kafka
async def test_a_3_mb_dead_letter_is_redriven_when_the_request_size_setting_allows_it(
    dlq_settings: SettingsFactory, new_topic: TopicFactory, kafka_bootstrap: str
) -> None:
    five_mb = str(5 * 1024 * 1024)
    source = await new_topic(configs={"max.message.bytes": five_mb})
    dead_letter_topic = f"{source}.dlq"
    value = b'{"blob": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    [letter] = letters_for(source, 1, value=value)
    # Created beforehand with the broker's default size: too small for its source. The
    # service's start grows it (max.message.bytes alone; the retention stays unlimited).
    await create_topics(kafka_bootstrap, dead_letter_topic, configs=DEAD_LETTER_TOPIC_CONFIG)
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})

    async with DeadLetterService(settings) as service:
        assert service.sizes[dead_letter_topic] == []
        assert service.retention[dead_letter_topic] == []
        assert (await asyncio.to_thread(scrape, service.url))["hopchain_dlq_size_unsafe"] == {
            (("topic", dead_letter_topic),): 0.0
        }
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=6 << 20)
    await producer.start()
    try:
        await producer.send_and_wait(
            dead_letter_topic, letter.value, key=letter.key, headers=list(letter.headers)
        )
    finally:
        await producer.stop()

    small = await started_triage(settings)
    try:
        with pytest.raises(TriageError, match="HOPCHAIN_DLQ_MAX_REQUEST_BYTES=1048576"):
            await small.redrive(letter.dead_letter_id, who="alice", reason="too big")
    finally:
        await small.stop()
    large = await started_triage(settings.model_copy(update={"dlq_max_request_bytes": 6 << 20}))
    try:
        # The failed attempt released its claim: no waiting for it to expire.
        done = await large.redrive(letter.dead_letter_id, who="alice", reason="room now")
    finally:
        await large.stop()
    assert done.record.value == value
    [record] = await read_topic(kafka_bootstrap, source)
    assert record.value == value
    assert len(record.value) > 3 * 1024 * 1024


@pytest.mark.kafka
async def test_a_dead_letter_topic_the_service_creates_has_room_for_its_sources_records(
    dlq_settings: SettingsFactory, new_topic: TopicFactory
) -> None:
    five_mb = 5 * 1024 * 1024
    source = await new_topic(configs={"max.message.bytes": str(five_mb)})
    dead_letter_topic = f"{source}.dlq"
    settings = dlq_settings(dlq_topics={dead_letter_topic: "billing"})

    async with DeadLetterService(settings) as service:
        assert service.sizes[dead_letter_topic] == []
        assert (await asyncio.to_thread(scrape, service.url))["hopchain_dlq_size_unsafe"] == {
            (("topic", dead_letter_topic),): 0.0
        }
