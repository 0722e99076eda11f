"""The documentation site builds strictly, and in a real browser every page opens and every
link on it leads somewhere.

The site is built with ``mkdocs build --strict`` into a temporary folder and served on
loopback; a headless Chromium opens each page, follows nothing but collects every link,
image and stylesheet the page holds, and each one on the site must answer 200. A screenshot
of each page is saved in the test's temporary folder (``pytest --basetemp DIR`` keeps them
where you can look).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    "",
    "quickstart/",
    "guides/faststream/",
    "guides/aiokafka/",
    "guides/confluent/",
    "guides/rollout/",
    "guides/failure-policy/",
    "guides/dead-letter-service/",
    "reference/api/",
    "reference/configuration/",
    "reference/cli/",
    "reference/metrics/",
    "reference/reason-codes/",
    "reference/errors/",
    "reference/wire-format/",
    "reference/spec/",
    "reference/layout/",
    "runbooks/",
)
"""Pages that must exist; every page the build wrote is opened, these and the others."""
WIDTH, HEIGHT, TALLEST = 1280, 1000, 8000
"""The browser's window, and how tall a screenshot may grow."""

_COLLECT = """
return Array.from(
  document.querySelectorAll('a[href], img[src], link[rel="stylesheet"][href], script[src]'),
  element => element.href || element.src
);
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``make docs`` builds it."""
    folder = tmp_path_factory.mktemp("site")
    result = subprocess.run(  # noqa: S603 - our interpreter, fixed arguments
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The base URL of the built site, served on 127.0.0.1."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
            del format, args

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a profile of its own, fetching nothing but what it is sent to."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        message = "the site test drives a real browser: apt-get install chromium chromium-driver"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespaces for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(argument)
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


def built_pages(site: Path) -> list[str]:
    """Every page the build wrote, as a path below the site's root (``""`` is the home page)."""
    pages = []
    for index in sorted(site.rglob("index.html")):
        relative = index.parent.relative_to(site).as_posix()
        if relative.startswith(("assets", "search")):
            continue
        pages.append("" if relative == "." else f"{relative}/")
    return pages


def _screenshot(browser: webdriver.Chrome, path: Path) -> None:
    """The whole page (up to a tall limit), not only the first screen of it."""
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(WIDTH, min(max(height, HEIGHT), TALLEST))
    browser.save_screenshot(str(path))
    browser.set_window_size(WIDTH, HEIGHT)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_site_has_every_page_the_navigation_promises(site: Path) -> None:
    assert set(PAGES) <= set(built_pages(site))
    spec = (site / "reference" / "spec" / "index.html").read_text(encoding="utf-8")
    assert "hopchain envelope, schema 2: wire format" in spec  # SPEC.md, read at build time


def test_every_page_opens_and_every_link_on_it_answers(
    site: Path, served: str, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    checked: dict[str, int] = {}
    broken: list[str] = []
    for page in built_pages(site):
        browser.get(served + page)
        heading = browser.find_elements(By.CSS_SELECTOR, "article h1")
        assert heading, f"{page or 'home'}: no page heading"
        assert "hopchain" in browser.title, browser.title
        name = (page.strip("/").replace("/", "-") or "home") + ".png"
        _screenshot(browser, shots / name)
        for link in browser.execute_script(_COLLECT):
            target = urllib.parse.urldefrag(str(link)).url
            if not target.startswith(served):
                continue  # another site: not ours to check here
            if target not in checked:
                checked[target] = _status(target)
            if checked[target] != 200:
                broken.append(f"{page or '(home)'} -> {target}: {checked[target]}")
    assert not broken, "\n".join(broken)
    assert len(checked) > len(PAGES)
    images = [url for url in checked if url.endswith(".png")]
    assert len(images) >= 3, images  # the console's screenshots
