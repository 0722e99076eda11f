"""A real headless Chromium for the console tests, driven by Selenium from async tests.

Debian's ``chromium`` and ``chromium-driver`` are used as installed: the driver's path is
given to Selenium explicitly, so Selenium Manager is never asked to find or download one.
Without them the tests are skipped locally and fail under CI=true.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from hopchain.schemas.chain import append_hop, new_envelope
from hopchain.schemas.codec import ENVELOPE_HEADER, TRACEPARENT_HEADER
from hopchain.schemas.deadletter import DeadLetterInfo, dead_letter_headers
from hopchain.schemas.failure import Attempt, Effect, Failure
from hopchain.schemas.hop import Position
from hopchain.schemas.ids import new_envelope_id, new_span_id
from hopchain.schemas.traceparent import format_traceparent
from hopchain.schemas.vocabulary import (
    AttemptKind,
    AttemptOutcome,
    Decision,
    EffectKind,
    ErrorType,
)
from hopchain.testing.deadletters import SyntheticDeadLetter

SCREENSHOTS = os.environ.get("HOPCHAIN_CONSOLE_SCREENSHOTS")
"""A folder to save the pages' screenshots in (docs/ holds the committed ones)."""


def _executables() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        message = (
            "chromium and chromedriver are not on PATH; the console tests drive a real "
            "browser. Install them: apt-get install chromium chromium-driver"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return browser, driver


def make_driver() -> webdriver.Chrome:
    """A headless Chromium, 1400x1000, that downloads nothing."""
    browser, driver = _executables()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespaces for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


class Browser:
    """Selenium's blocking calls, each in a worker thread so the service's loop runs on."""

    def __init__(self, driver: webdriver.Chrome, base: str = "") -> None:
        self.driver = driver
        self.base = base

    async def _do(self, call: Any, *args: Any) -> Any:
        return await asyncio.to_thread(call, *args)

    async def open(self, path: str) -> None:
        await self._do(self.driver.get, self.base + path)

    async def one(self, css: str) -> WebElement:
        element: WebElement = await self._do(self.driver.find_element, By.CSS_SELECTOR, css)
        return element

    async def all(self, css: str) -> list[WebElement]:
        found: list[WebElement] = await self._do(self.driver.find_elements, By.CSS_SELECTOR, css)
        return found

    async def text(self, css: str) -> str:
        element = await self.one(css)
        text: str = await self._do(lambda: element.text)
        return text

    async def texts(self, css: str) -> list[str]:
        elements = await self.all(css)
        texts: list[str] = await self._do(lambda: [element.text for element in elements])
        return texts

    async def attributes(self, css: str, name: str) -> list[str | None]:
        elements = await self.all(css)
        found: list[str | None] = await self._do(
            lambda: [element.get_attribute(name) for element in elements]
        )
        return found

    async def attribute(self, css: str, name: str) -> str | None:
        element = await self.one(css)
        value: str | None = await self._do(element.get_attribute, name)
        return value

    async def fill(self, css: str, value: str) -> None:
        element = await self.one(css)
        await self._do(element.clear)
        await self._do(element.send_keys, value)

    async def choose(self, css: str, visible_text: str) -> None:
        element = await self.one(css)
        await self._do(Select(element).select_by_visible_text, visible_text)

    async def tick(self, css: str) -> None:
        """Click a checkbox (nothing to wait for)."""
        element = await self.one(css)
        await self._do(element.click)

    async def click(self, css: str) -> None:
        """Click a link or button and wait until the page it leads to has replaced this one."""
        element = await self.one(css)

        def click_and_wait() -> None:
            page = self.driver.find_element(By.TAG_NAME, "html")
            element.click()

            def replaced(_: object) -> bool:
                # Stale, or (mid-navigation) not in any document: the old page is gone.
                try:
                    page.is_enabled()
                except WebDriverException:
                    return True
                return False

            WebDriverWait(self.driver, 60, poll_frequency=0.05).until(replaced)
            WebDriverWait(self.driver, 60, poll_frequency=0.05).until(
                lambda driver: driver.execute_script("return document.readyState") == "complete"
            )

        await self._do(click_and_wait)

    async def sign_in(self, token: str) -> None:
        """Type the service's token into the sign-in form its pages show until then."""
        await self.open("/ui")
        assert (await self.title()).startswith("Sign in")
        await self.fill("#sign-in-form input[name=token]", token)
        await self.click("#sign-in-form button")
        assert not (await self.title()).startswith("Sign in")

    async def cookie_header(self) -> str:
        """The browser's cookies, as a ``Cookie`` header for a request made without it."""
        cookies: list[dict[str, Any]] = await self._do(self.driver.get_cookies)
        return "; ".join(f"{cookie['name']}={cookie['value']}" for cookie in cookies)

    async def title(self) -> str:
        title: str = await self._do(lambda: self.driver.title)
        return title

    async def source(self) -> str:
        source: str = await self._do(lambda: self.driver.page_source)
        return source

    async def run(self, script: str) -> Any:
        return await self._do(self.driver.execute_script, script)

    async def screenshot(self, name: str, *, full: bool = False) -> None:
        """Save the page (``full``: all of it) as ``name`` in :data:`SCREENSHOTS`, if set."""
        if not SCREENSHOTS:
            return
        folder = Path(SCREENSHOTS)

        def shoot() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            if full:
                # The window is taller than the viewport by the browser's own frame.
                script = "return [document.documentElement.scrollHeight, window.innerHeight]"
                height, inner = self.driver.execute_script(script)
                frame = 1000 - int(inner)
                self.driver.set_window_size(1400, min(int(height) + frame, 4000))
            self.driver.save_screenshot(str(folder / name))
            self.driver.set_window_size(1400, 1000)

        await self._do(shoot)


def browser_session() -> Iterator[webdriver.Chrome]:
    """One browser for a test module."""
    driver = make_driver()
    try:
        yield driver
    finally:
        driver.quit()


def _at(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)


def pipeline_dead_letter(
    *,
    owner: str,
    source_topic: str,
    parked_at: float,
    value: bytes,
    run_id: str = "run-1",
    work_item_id: str = "item-1",
) -> SyntheticDeadLetter:
    """A dead letter as a three-hop pipeline leaves it: forwarded, then given up on.

    The failing stage retried twice, committed one effect before failing, and offers a
    recovery hint.
    """
    start = datetime.fromtimestamp(parked_at, UTC) - timedelta(seconds=3)
    envelope = append_hop(
        new_envelope(
            contract=source_topic, contract_version=1, run_id=run_id, work_item_id=work_item_id
        ),
        component="claims-api",
        instance="api-1c4a:1",
        decision=Decision.ORIGINATED,
        span_id=new_span_id(),
        decided_at=_at(start, -0.2),
        destination="claims.raw",
    )
    forwarded = append_hop(
        envelope,
        component="claims-intake",
        instance="intake-7f9c:1",
        decision=Decision.FORWARDED,
        span_id=new_span_id(),
        observation="validated claim; routed to pricing",
        received_from=Position(topic="claims.raw", partition=0, offset=4411),
        received_at=_at(start, 0.0),
        decided_at=_at(start, 0.012),
        destination=source_topic,
    )
    attempts = (
        Attempt(
            number=1,
            kind=AttemptKind.FIRST,
            outcome=AttemptOutcome.FAILED,
            error_type=ErrorType.TRANSIENT,
            started_at=_at(start, 0.1),
            duration_ms=2000,
            description="ledger timed out",
        ),
        Attempt(
            number=2,
            kind=AttemptKind.TRANSPORT,
            outcome=AttemptOutcome.FAILED,
            error_type=ErrorType.INTERNAL,
            started_at=_at(start, 2.2),
            duration_ms=640,
        ),
    )
    effects = (
        Effect(kind=EffectKind.RECORD_WRITTEN, target="pricing.quotes", identifier="quote-88121"),
    )
    failure = Failure(
        component="pricing",
        error_type=ErrorType.INTERNAL,
        description="ledger rejected the row: currency 'XBT' has no rate table",
        locally_resolvable=False,
        attempts=attempts,
        effects=effects,
        recovery_hint="add a rate table for XBT, then redrive",
    )
    parked = datetime.fromtimestamp(parked_at, UTC)
    parked_envelope = append_hop(
        forwarded,
        component="pricing",
        instance="pricing-5d2e:2",
        decision=Decision.DEAD_LETTERED,
        span_id=new_span_id(),
        received_from=Position(topic=source_topic, partition=0, offset=1207),
        received_at=_at(start, 0.05),
        decided_at=parked,
        destination=source_topic + ".dlq",
        attempts=attempts,
        effects=effects,
        failure=failure,
    )
    info = DeadLetterInfo(
        dead_letter_id=new_envelope_id(int(parked_at * 1000)),
        reason=None,
        path=None,
        error_type=ErrorType.INTERNAL,
        owner=owner,
        component="pricing",
        group="pricing",
        source_topic=source_topic,
        source_partition=0,
        source_offset=1207,
        source_timestamp_ms=int(parked_at * 1000) - 3000,
        parked_at=parked,
        failure=failure,
        envelope=parked_envelope,
    )
    last = forwarded.chain[-1]
    original = [
        (TRACEPARENT_HEADER, format_traceparent(forwarded.trace_id, last.span_id).encode()),
        (ENVELOPE_HEADER, forwarded.__pydantic_serializer__.to_json(forwarded)),
    ]
    return SyntheticDeadLetter(
        dead_letter_id=info.dead_letter_id,
        owner=owner,
        source_topic=source_topic,
        error_type=ErrorType.INTERNAL,
        parked_at=parked_at,
        key=b"claim-20931",
        value=value,
        headers=(*original, *dead_letter_headers(info)),
        envelope=parked_envelope,
    )
