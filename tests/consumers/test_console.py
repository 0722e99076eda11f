"""The dead-letter console in a real headless Chromium, against the real broker."""

from __future__ import annotations

import asyncio
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from aiokafka import AIOKafkaProducer
from console_browser import Browser, browser_session, pipeline_dead_letter
from dlq_helpers import (
    SettingsFactory,
    read_topic,
    report_figure,
    scrape,
    settings_factory,
    wait_until,
)
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from selenium import webdriver

from hopchain import Hopchain, HopchainMiddleware, origin
from hopchain.consumers import DeadLetterService, ResolutionKind
from hopchain.lookup import find_record
from hopchain.schemas import (
    ENVELOPE_HEADER,
    ContractRegistry,
    Decision,
    ErrorType,
    TopicContract,
)
from hopchain.schemas.deadletter import REDRIVE_COUNT_HEADER
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics, unique_topic_name
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    envelope_for,
    produce_dead_letters,
    synthetic_dead_letter,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    yield from browser_session()


@pytest.fixture
def dlq_settings(kafka_bootstrap: str) -> SettingsFactory:
    return settings_factory(kafka_bootstrap)


def fetch(
    url: str, data: bytes | None = None, cookie: str | None = None
) -> tuple[int, dict[str, str], str]:
    """One request; status, headers and body text, whatever the status."""
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")  # noqa: S310
    if data is not None:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
    if cookie is not None:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


@pytest.mark.slow
async def test_overview_shows_the_figures_of_metrics_sorted_and_linked(
    dlq_settings: SettingsFactory, driver: webdriver.Chrome
) -> None:
    sources = {"payments": unique_topic_name("orders"), "claims": unique_topic_name("claims")}
    settings = dlq_settings(dlq_topics={f"{topic}.dlq": owner for owner, topic in sources.items()})
    frozen = time.time()
    letters = [
        synthetic_dead_letter(
            owner=owner,
            source_topic=sources[owner],
            error_type=error_type,
            parked_at=frozen - 60.0 * (number + 1) - 7.25 * index,
            envelope=envelope_for(sources[owner]) if number % 2 else None,
        )
        for index, (owner, error_type, count) in enumerate(
            (
                ("payments", ErrorType.INTERNAL, 7),
                ("payments", ErrorType.TRANSIENT, 3),
                ("claims", ErrorType.REJECTED_INPUT, 12),
                ("claims", ErrorType.MALFORMED, 1),
            )
        )
        for number in range(count)
    ]
    async with DeadLetterService(settings, clock=lambda: frozen, broker_clock=False) as service:
        for owner, topic in sources.items():
            chunk = [one for one in letters if one.owner == owner]
            await produce_dead_letters(settings.kafka_bootstrap, f"{topic}.dlq", chunk)
        await wait_until(lambda: len(service.index) == len(letters), what="23 indexed")
        browser = Browser(driver, service.url)

        await browser.open("/ui?sort=depth&order=desc")
        owners = await browser.texts("#overview td.owner")
        topics = await browser.texts("#overview td.source-topic")
        kinds = await browser.texts("#overview td.error-type")
        depths = [int(text) for text in await browser.texts("#overview td.depth")]
        ages = [
            float(age or "nan")
            for age in await browser.attributes("#overview td.age", "data-seconds")
        ]
        shown = {
            (owner, topic, kind): (depth, age)
            for owner, topic, kind, depth, age in zip(
                owners, topics, kinds, depths, ages, strict=True
            )
        }
        metrics = await asyncio.to_thread(scrape, service.url)
        depth, age = metrics["hopchain_dlq_depth"], metrics["hopchain_dlq_oldest_age_seconds"]
        from_metrics = {
            (labels["owner"], labels["source_topic"], labels["error_type"]): (
                int(value),
                age[key],
            )
            for key, value in depth.items()
            for labels in [dict(key)]
        }
        assert shown.keys() == from_metrics.keys()
        assert len(shown) == 4
        for group, (count, oldest) in from_metrics.items():
            assert shown[group][0] == count
            assert shown[group][1] == pytest.approx(oldest, abs=1e-3)
        assert await browser.text("#total-depth") == str(len(letters))
        # Sorted by depth, deepest first, as asked.
        assert depths == [12, 7, 3, 1]
        await browser.screenshot("console-overview.png")

        # Sorting by age from the page's own header link, then opening a group.
        await browser.click("#overview th:nth-child(5) a")
        assert await browser.text("#overview tbody tr:first-child td.age") == "12m14s"
        await browser.click("#overview tbody tr:first-child a.button")
        assert await browser.text("#match-count") == "12"
        assert "rejected_input" in await browser.text("#letters tbody")


async def check_redriven(
    kafka_bootstrap: str,
    service: DeadLetterService,
    source: str,
    chosen: list[SyntheticDeadLetter],
    others: list[SyntheticDeadLetter],
) -> None:
    """Exactly ``chosen`` went back, once each, resolved by erin, each with a redriven hop."""
    sent = await read_topic(kafka_bootstrap, source)
    assert len(sent) == len(chosen)
    assert sorted(record.key for record in sent) == sorted(one.key or b"" for one in chosen)
    for one in chosen:
        resolution = service.index.resolution(one.dead_letter_id)
        assert resolution is not None
        assert (resolution.resolution, resolution.who) == (ResolutionKind.REDRIVEN, "erin")
    for one in others:
        assert service.index.resolution(one.dead_letter_id) is None
    for record in sent:
        envelope = load_envelope(dict(record.headers)[ENVELOPE_HEADER])
        assert envelope.chain[-1].decision is Decision.REDRIVEN
        assert envelope.chain[-1].observation == "redriven by erin: ledger is back"


async def check_traces(
    kafka_bootstrap: str, source: str, chosen: list[SyntheticDeadLetter]
) -> None:
    """``hopchain trace``'s search finds every one on the source topic, redriven, intact."""
    for one in chosen:
        assert one.envelope is not None
        found = await find_record(kafka_bootstrap, one.envelope.id, [source, f"{source}.dlq"])
        path = found.path
        assert path is not None
        assert path.topic == source
        assert path.envelope is not None
        assert [hop.decision for hop in path.envelope.chain] == [
            Decision.ORIGINATED,
            Decision.DEAD_LETTERED,
            Decision.REDRIVEN,
        ]
        assert path.integrity is not None
        assert path.integrity.ok


@pytest.mark.slow
async def test_bulk_redrive_by_filter_moves_exactly_those_fifty_and_the_trace_shows_it(
    dlq_settings: SettingsFactory,
    driver: webdriver.Chrome,
    kafka_bootstrap: str,
    pytestconfig: pytest.Config,
) -> None:
    source = unique_topic_name("invoices")
    await create_topics(kafka_bootstrap, source)
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "billing"}, dlq_token=token)
    now = time.time()

    def letter(number: int, owner: str, error_type: ErrorType) -> SyntheticDeadLetter:
        return synthetic_dead_letter(
            owner=owner,
            source_topic=source,
            error_type=error_type,
            parked_at=now - 3600 + number,
            envelope=envelope_for(source, work_item_id=f"invoice-{number}"),
            key=f"invoice-{number}".encode(),
            value=f'{{"invoice": {number}}}'.encode(),
        )

    chosen = [letter(n, "billing", ErrorType.TRANSIENT) for n in range(50)]
    others = [letter(100 + n, "billing", ErrorType.INTERNAL) for n in range(6)]
    others += [letter(200 + n, "ledger", ErrorType.TRANSIENT) for n in range(4)]
    async with DeadLetterService(settings) as service:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", [*chosen, *others])
        await wait_until(lambda: len(service.index) == 60, what="60 indexed")
        browser = Browser(driver, service.url)
        await browser.sign_in(token)

        await browser.open("/ui/dead-letters")
        assert await browser.text("#match-count") == "60"
        await browser.choose("select[name=owner]", "billing")
        await browser.choose("select[name=error_type]", "transient")
        await browser.click("form.filters button")
        assert await browser.text("#match-count") == "50"
        await browser.screenshot("console-list.png")
        await browser.click("#bulk-redrive")
        assert await browser.text("#preview-count") == "50"
        previewed = await browser.texts("#preview tbody td.id")
        assert previewed == [one.dead_letter_id for one in chosen]
        await browser.fill("#bulk-form input[name=who]", "erin")
        await browser.fill("#bulk-form input[name=reason]", "ledger is back")
        await browser.fill("#bulk-form input[name=token]", token)
        started = time.perf_counter()
        await browser.click("#confirm")
        assert await browser.text("#done-count") == "50"
        seconds = time.perf_counter() - started
        assert await browser.text("#refused-count") == "0"
        assert await browser.text("#failed-count") == "0"
        assert token not in await browser.source()

        await check_redriven(kafka_bootstrap, service, source, chosen, others)
        await check_traces(kafka_bootstrap, source, chosen)
        # The dead letter's page shows it too, under "where the record is now".
        await browser.open(f"/ui/dead-letters/{quote(chosen[0].dead_letter_id)}")
        assert (await browser.text("#status")).startswith("redriven by erin")
        rows = await browser.texts("#sightings tbody tr")
        assert any(row.startswith(source + " ") and "redriven" in row for row in rows), rows
        # Nothing is left to redrive by that filter.
        await browser.open("/ui/bulk?action=redrive&owner=billing&error_type=transient")
        assert await browser.text("#preview-count") == "0"
    report_figure(
        pytestconfig,
        f"console: bulk redrive of 50 dead letters by filter, confirm to result page: "
        f"{seconds:.2f} s ({seconds / 50 * 1000:.0f} ms each)",
    )


async def test_a_payload_with_script_renders_as_text_under_a_strict_policy(
    dlq_settings: SettingsFactory, driver: webdriver.Chrome, kafka_bootstrap: str
) -> None:
    source = unique_topic_name("claims")
    token = secrets.token_hex(8)
    settings = dlq_settings(
        dlq_topics={f"{source}.dlq": "claims-team"},
        dlq_trace_url="https://tracing.example/trace/{trace_id}",
        dlq_token=token,
    )
    hostile = b'{"claim": "<script>document.title=\'pwned\'</script>", "note": "<b>bold</b>"}'
    parked = pipeline_dead_letter(
        work_item_id="claim-20931",
        run_id="nightly-0412",
        owner="claims-team",
        source_topic=source,
        parked_at=time.time() - 5400,
        value=hostile,
    )
    async with DeadLetterService(settings) as service:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", [parked])
        await wait_until(lambda: len(service.index) == 1, what="one indexed")
        browser = Browser(driver, service.url)
        await browser.sign_in(token)
        await browser.open(f"/ui/dead-letters/{quote(parked.dead_letter_id)}")

        assert await browser.title() != "pwned"
        assert "<script>document.title='pwned'</script>" in await browser.text("#payload")
        assert await browser.all("#payload script, #payload b") == []
        assert "&lt;script&gt;" in await browser.source()
        assert await browser.texts("#timeline .decision") == [
            "originated",
            "forwarded",
            "dead_lettered",
        ]
        assert await browser.texts("#timeline .mark") == ["ok", "ok", "ok"]
        assert "only a hint" in await browser.text("dd.hint")
        assert parked.envelope is not None
        assert await browser.attribute("#trace-link", "href") == (
            f"https://tracing.example/trace/{parked.envelope.trace_id}"
        )
        await browser.screenshot("console-dead-letter.png", full=True)

        cookie = await browser.cookie_header()
        status, headers, _ = await asyncio.to_thread(
            fetch,
            f"{service.url}/ui/dead-letters/{quote(parked.dead_letter_id)}/payload",
            None,
            cookie,
        )
        assert status == 200
        status, headers, body = await asyncio.to_thread(fetch, f"{service.url}/ui", None, cookie)
        assert status == 200
        policy = headers["content-security-policy"]
        assert "default-src 'self'" in policy
        assert "script-src 'none'" in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["x-content-type-options"] == "nosniff"
        assert "<script" not in body


async def test_mutating_requests_without_the_token_or_the_csrf_field_are_refused(
    dlq_settings: SettingsFactory, driver: webdriver.Chrome, kafka_bootstrap: str
) -> None:
    source = unique_topic_name("locks")
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "team-a"}, dlq_token=token)
    parked = synthetic_dead_letter(owner="team-a", source_topic=source, parked_at=time.time() - 60)
    page = f"/ui/dead-letters/{quote(parked.dead_letter_id)}"
    async with DeadLetterService(settings) as service:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", [parked])
        await wait_until(lambda: len(service.index) == 1, what="one indexed")
        browser = Browser(driver, service.url)
        await browser.sign_in(token)

        # In the browser: no token typed -> 401; the CSRF field removed -> 403.
        await browser.open(page)
        await browser.fill("input[name=who]", "mallory")
        await browser.fill("input[name=reason]", "testing the lock")
        await browser.click("#discard")
        assert (await browser.title()).startswith("401")
        await browser.open(page)
        await browser.fill("input[name=who]", "mallory")
        await browser.fill("input[name=reason]", "testing the lock")
        await browser.fill("input[name=token]", token)
        await browser.run("document.querySelector('input[name=csrf]').remove()")
        await browser.click("#discard")
        assert (await browser.title()).startswith("403")
        assert "CSRF" in await browser.text("#error")

        # Without the browser: no cookie, or a forged proof, is refused even with the token.
        url = f"{service.url}{page}/discard"
        form = {"who": "mallory", "reason": "forged", "token": token}
        status, _, _ = await asyncio.to_thread(fetch, url, urlencode(form).encode())
        assert status == 403
        forged = urlencode({**form, "csrf": "0" * 64}).encode()
        status, _, _ = await asyncio.to_thread(fetch, url, forged, "hopchain_csrf=" + "a" * 64)
        assert status == 403
        assert service.index.resolution(parked.dead_letter_id) is None

        # With everything right, the same form works: the refusals were the guard.
        await browser.open(page)
        await browser.fill("input[name=who]", "alice")
        await browser.fill("input[name=reason]", "a duplicate")
        await browser.fill("input[name=token]", token)
        await browser.click("#discard")
        assert (await browser.text("#done")).startswith("Done: discarded by alice")

    # No token configured: the buttons are off and the server refuses anyway.
    open_settings = dlq_settings(dlq_topics={f"{source}.dlq": "team-a"})
    async with DeadLetterService(open_settings) as service:
        await wait_until(lambda: len(service.index) == 1, what="one indexed")
        browser = Browser(driver, service.url)
        await browser.open(page)
        assert await browser.attribute("#redrive", "disabled") == "true"
        assert await browser.attribute("#discard", "disabled") == "true"
        status, _, body = await asyncio.to_thread(
            fetch, f"{service.url}{page}/redrive", urlencode(form).encode()
        )
        assert status == 403
        assert "HOPCHAIN_DLQ_TOKEN" in body


async def test_a_broken_chain_and_the_loop_guard_are_shown_and_refused_as_by_the_cli(
    dlq_settings: SettingsFactory, driver: webdriver.Chrome, kafka_bootstrap: str
) -> None:
    source = unique_topic_name("quotes")
    await create_topics(kafka_bootstrap, source)
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "ops"}, dlq_token=token)
    now = time.time()
    honest = pipeline_dead_letter(
        owner="ops", source_topic=source, parked_at=now - 900, value=b"{}"
    )
    # Somebody edited what hop 1 said after the chain was sealed.
    tampered = replace(
        honest,
        headers=tuple(
            (name, raw.replace(b"routed to pricing", b"routed to billing"))
            if name == "hopchain-dlq-envelope"
            else (name, raw)
            for name, raw in honest.headers
        ),
    )
    looped = synthetic_dead_letter(
        owner="ops",
        source_topic=source,
        parked_at=now - 600,
        envelope=envelope_for(source),
        extra_headers=[(REDRIVE_COUNT_HEADER, b"3")],
    )
    async with DeadLetterService(settings) as service:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", [tampered, looped])
        await wait_until(lambda: len(service.index) == 2, what="two indexed")
        browser = Browser(driver, service.url)
        await browser.sign_in(token)

        await browser.open(f"/ui/dead-letters/{quote(tampered.dead_letter_id)}")
        assert "chain broken at hop 1" in await browser.text("#integrity-broken")
        assert await browser.texts("#timeline .mark") == ["ok", "BROKEN", "unverified"]

        await browser.open("/ui/bulk?action=redrive&owner=ops")
        assert await browser.text("#preview-count") == "2"
        await browser.fill("#bulk-form input[name=who]", "erin")
        await browser.fill("#bulk-form input[name=reason]", "retry all")
        await browser.fill("#bulk-form input[name=token]", token)
        await browser.click("#confirm")
        assert await browser.text("#done-count") == "0"
        assert await browser.text("#refused-count") == "1"
        assert await browser.text("#failed-count") == "1"
        page = await browser.source()
        assert "in a loop, not unlucky" in page
        assert "does not verify" in page
        assert await read_topic(kafka_bootstrap, source) == []

        # Forced from its own page, the looped one goes back once, with redrive count 4.
        await browser.open(f"/ui/dead-letters/{quote(looped.dead_letter_id)}")
        await browser.fill("input[name=who]", "erin")
        await browser.fill("input[name=reason]", "the cause is fixed")
        await browser.fill("input[name=token]", token)
        await browser.tick("input[name=force]")
        await browser.click("#redrive")
        assert (await browser.text("#done")).startswith("Done: redriven by erin")
        [sent] = await read_topic(kafka_bootstrap, source)
        assert dict(sent.headers)[REDRIVE_COUNT_HEADER] == b"4"
        resolution = service.index.resolution(looped.dead_letter_id)
        assert resolution is not None
        assert resolution.redrive is not None
        assert resolution.redrive.forced
        assert service.index.resolution(tampered.dead_letter_id) is None


async def test_with_a_token_every_page_asks_for_it_before_showing_a_dead_letter(
    dlq_settings: SettingsFactory, driver: webdriver.Chrome, kafka_bootstrap: str
) -> None:
    source = unique_topic_name("secrets")
    token = secrets.token_hex(16)
    settings = dlq_settings(dlq_topics={f"{source}.dlq": "team-s"}, dlq_token=token)
    parked = synthetic_dead_letter(
        owner="team-s",
        source_topic=source,
        parked_at=time.time() - 60,
        value=b'{"pin": "swordfish"}',
    )
    page = f"/ui/dead-letters/{quote(parked.dead_letter_id)}"
    pages = ["/ui", "/ui/dead-letters", page, f"{page}/payload", "/ui/bulk?owner=team-s"]
    async with DeadLetterService(settings) as service:
        await produce_dead_letters(kafka_bootstrap, f"{source}.dlq", [parked])
        await wait_until(lambda: len(service.index) == 1, what="one indexed")
        for path in pages:
            status, _, body = await asyncio.to_thread(fetch, f"{service.url}{path}")
            assert status == 401, path
            # Nothing about the dead letter (its id is only in the form's way back).
            # The value is a word no hex nonce or ULID can spell by chance.
            assert source not in body
            assert "swordfish" not in body
            assert 'id="sign-in-form"' in body

        browser = Browser(driver, service.url)
        await browser.open(page)
        await browser.fill("#sign-in-form input[name=token]", "not-the-token")
        await browser.click("#sign-in-form button")
        assert (await browser.title()).startswith("401")
        await browser.open(page)
        await browser.fill("#sign-in-form input[name=token]", token)
        await browser.click("#sign-in-form button")
        # Back on the page it asked for, and the token is in no page or cookie.
        assert await browser.text("#status") == "unresolved"
        cookie = await browser.cookie_header()
        assert token not in cookie
        assert token not in await browser.source()
        status, _, body = await asyncio.to_thread(
            fetch, f"{service.url}{page}/payload", None, cookie
        )
        assert (status, body) == (200, '{"pin": "swordfish"}')
        # A session cookie made for another nonce is worth nothing.
        forged = cookie.replace(cookie.split("hopchain_csrf=")[1][:64], "b" * 64)
        status, _, _ = await asyncio.to_thread(fetch, f"{service.url}/ui", None, forged)
        assert status == 401


async def test_a_dead_letter_with_an_intact_chain_and_another_payload_shows_both_verdicts(
    dlq_settings: SettingsFactory, kafka_bootstrap: str
) -> None:

    class Quote(BaseModel):
        quote_id: str
        amount: int

    source, output = unique_topic_name("quotes"), unique_topic_name("priced")
    await create_topics(kafka_bootstrap, source, output, f"{source}.dlq")
    registry = ContractRegistry(
        [TopicContract(topic=name, model=Quote, owner="ops") for name in (source, output)]
    )
    feeder = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="feeder"))]
    )
    stage = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(Hopchain(registry, component="pricing"))],
        ack_policy=AckPolicy.ACK,
    )

    async def price(quote: Quote) -> Quote:
        return quote

    stage.subscriber(source, group_id=unique_topic_name("g"), auto_offset_reset="earliest")(
        stage.publisher(output)(price)
    )
    await feeder.start()
    await stage.start()
    try:
        with origin(run_id="run-q", work_item_id="quote-1", intent_key=unique_topic_name("ik")):
            await feeder.publish(Quote(quote_id="q1", amount=100), source)
        [sealed] = await wait_until_read(kafka_bootstrap, source)
        # The same headers, byte for byte, with another payload the contract accepts.
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(
                source, b'{"quote_id":"q1","amount":1}', headers=list(sealed.headers)
            )
        finally:
            await producer.stop()
        [parked] = await wait_until_read(kafka_bootstrap, f"{source}.dlq")
    finally:
        await stage.stop()
        await feeder.stop()
    assert dict(parked.headers)["hopchain-dlq-reason"] == b"payload_mismatch"
    dead_letter_id = dict(parked.headers)["hopchain-dlq-id"].decode()

    async with DeadLetterService(dlq_settings(dlq_topics={f"{source}.dlq": "ops"})) as service:
        await wait_until(lambda: len(service.index) == 1, what="one indexed")
        status, _, page = await asyncio.to_thread(
            fetch, f"{service.url}/ui/dead-letters/{quote(dead_letter_id)}"
        )

    assert status == 200
    assert '<span class="badge ok" id="chain-intact">chain intact</span>' in page
    assert 'class="badge bad">payload NOT as sealed (hop 0)</span>' in page
    # Where the record is now: the sealed original, and the copy with the other payload.
    rows = [row.split("</tr>")[0] for row in page.split('<td class="mono">')[1:]]
    sealed_row = next(row for row in rows if row.startswith(f"{source}</td>") and ">0<" in row)
    assert '<td class="payload">as sealed (hop 0)</td>' in sealed_row
    assert '<td class="chain">intact</td>' in sealed_row
    parked_row = next(row for row in rows if row.startswith(f"{source}.dlq</td>"))
    assert '<td class="payload">NOT as sealed (hop 0)</td>' in parked_row
    assert '<td class="chain">intact</td>' in parked_row


async def wait_until_read(bootstrap: str, topic: str, count: int = 1) -> list[Any]:
    """The first ``count`` records of ``topic``, once it holds that many."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        records = await read_topic(bootstrap, topic)
        if len(records) >= count:
            return records[:count]
        await asyncio.sleep(0.3)
    pytest.fail(f"{topic} did not hold {count} record(s) within 30 s")
