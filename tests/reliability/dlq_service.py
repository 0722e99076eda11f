"""``hopchain dlq serve`` as a child process of a fault test, and how the test reads it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from reliability_support import REPO, wait_until

from hopchain.testing._provision import free_port


class DlqService:
    """``hopchain dlq serve`` as a child process, on a port of its own."""

    def __init__(self, bootstrap: str, topics: dict[str, str], resolutions: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        self.command = [
            sys.executable,
            "-m",
            "hopchain.cli",
            "dlq",
            "serve",
            "--bootstrap",
            bootstrap,
            "--resolutions-topic",
            resolutions,
            "--port",
            str(self.port),
            "--log-level",
            "WARNING",
        ]
        for topic, owner in topics.items():
            self.command += ["--dlq-topic", f"{topic}={owner}"]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        env = {
            **os.environ,
            "HOPCHAIN_DLQ_TOKEN": self.token,
            "PYTHONPATH": str(REPO),
            # An index file of its own, next to its log: kept across its restarts.
            "HOPCHAIN_DLQ_INDEX_PATH": str(self.log.with_suffix(".sqlite")),
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our interpreter, our CLI
                self.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.process.wait)
        self.kills += 1

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait)

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)  # noqa: S310 - our own local URL
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        text = raw.decode()
        return status, json.loads(text) if text.startswith(("{", "[")) else text

    async def ready_with(self, count: int, within: float) -> float:
        """Wait until /readyz says ready with ``count`` dead letters; return the seconds."""
        started = time.monotonic()

        def ready() -> bool:
            assert self.process is not None
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-3000:]
            try:
                status, body = self.call("GET", "/readyz")
            except OSError:
                return False
            return status == 200 and body.get("dead_letters") == count

        await wait_until(ready, within=within, what=f"the service ready with {count}", every=0.2)
        return time.monotonic() - started

    def metrics(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        status, text = self.call("GET", "/metrics")
        assert status == 200
        found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                found.setdefault(family.name, {})[tuple(sorted(sample.labels.items()))] = (
                    sample.value
                )
        return found

    def listed(self, query: str) -> list[dict[str, Any]]:
        """Every dead letter the listing shows, a page of at most 1,000 at a time."""
        found: list[dict[str, Any]] = []
        while True:
            path = f"/dead-letters?{query}&limit=1000&offset={len(found)}"
            status, body = self.call("GET", path, token=self.token)
            assert status == 200, body
            found.extend(body)
            if len(body) < 1000:  # the page size asked for
                return found

    def listed_ids(self) -> list[str]:
        return [letter["id"] for letter in self.listed("all=1")]
