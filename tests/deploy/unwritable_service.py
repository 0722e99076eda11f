"""A FastStream service with hopchain whose dead-letter topic refuses its dead letters.

Run as a process of its own (``python unwritable_service.py BOOTSTRAP SOURCE DLQ PORT``) by
tests/deploy/test_dashboard.py: the dead-letter topic is created with a tiny
``max.message.bytes``, so parking a rejected record fails on the broker, the middleware counts
every failed write, and the record is read again after a pause, round after round, without
being committed. Its metrics stay served on 127.0.0.1:PORT until SIGTERM. A process of its
own, so that the endless retries are not something to clean up inside the test's event loop.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from hopchain_services import hopchain_broker
from prometheus_client import CollectorRegistry, start_http_server
from pydantic import BaseModel

from hopchain.schemas import ContractRegistry, TopicContract

WRITE_ATTEMPTS = 4
FIRST_BACKOFF_SECONDS = 1.5
"""Failures 1.5, 3 and 6 s apart: Prometheus (1 s scrapes) sees the counter climb."""


class Claim(BaseModel):
    claim_id: str


async def serve(bootstrap: str, source: str, dead_letter_topic: str, port: int) -> None:
    registry = CollectorRegistry()
    contracts = ContractRegistry(
        [
            TopicContract(
                topic=source, model=Claim, owner="intake-team", dead_letter_topic=dead_letter_topic
            )
        ]
    )
    group = f"{source}-intake"
    broker = hopchain_broker(
        bootstrap,
        contracts,
        component="intake",
        group=group,
        metrics_registry=registry,
        dead_letter_attempts=WRITE_ATTEMPTS,
        dead_letter_backoff=FIRST_BACKOFF_SECONDS,
    )

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    async def handle(claim: Claim) -> None:
        del claim

    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await broker.start()
    print("serving", flush=True)  # noqa: T201 - the test waits for this line
    await stop.wait()
    await broker.stop()
    server.shutdown()
    thread.join(timeout=10)


if __name__ == "__main__":
    bootstrap, source, dead_letter_topic, port = sys.argv[1:5]
    asyncio.run(serve(bootstrap, source, dead_letter_topic, int(port)))
