"""A visible produce/consume round trip through a FastStream app on a real Kafka broker.

    make demo                       # starts a broker, runs this, stops the broker
    python examples/roundtrip.py    # uses `hopchain dev kafka start` or $HOPCHAIN_KAFKA_BOOTSTRAP

Publishes 20 orders to a new topic, consumes them with a FastStream subscriber in a consumer
group, prints each record as it arrives, and exits 1 unless every record came back exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path

from faststream import FastStream
from faststream.kafka import KafkaBroker
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from hopchain.exceptions import LocalKafkaError
from hopchain.testing import (
    BrokerStatus,
    broker_status,
    create_topics,
    default_run_dir,
    unique_topic_name,
)

console = Console(highlight=False)


class Order(BaseModel):
    """The demo's payload: FastStream serialises it to JSON and validates it on the way in."""

    order_id: int
    item: str
    quantity: int


ITEMS = ["kettle", "teapot", "mug", "saucer", "strainer"]


def find_bootstrap(explicit: str | None) -> str:
    """--bootstrap, else $HOPCHAIN_KAFKA_BOOTSTRAP, else the broker `hopchain dev kafka` runs."""
    if explicit:
        return explicit
    if os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP"):
        return os.environ["HOPCHAIN_KAFKA_BOOTSTRAP"]
    data_dir = Path(os.environ.get("HOPCHAIN_KAFKA_DATA_DIR") or default_run_dir())
    status, state = broker_status(data_dir.resolve())
    if status is not BrokerStatus.RUNNING or state is None:
        raise LocalKafkaError(
            f"no broker is running from {data_dir}; start one with `hopchain dev kafka start` "
            "or pass --bootstrap HOST:PORT"
        )
    return state.bootstrap


async def roundtrip(bootstrap: str, count: int) -> int:
    """Publish ``count`` orders, consume them, print both sides; return the process exit code."""
    topic = unique_topic_name("demo-orders")
    await create_topics(bootstrap, topic, partitions=2)
    console.print(f"broker [bold]{bootstrap}[/bold], topic [bold]{topic}[/bold] (2 partitions)")

    broker = KafkaBroker(bootstrap, log_level=logging.DEBUG)
    received: list[Order] = []
    all_in = asyncio.Event()

    @broker.subscriber(topic, group_id="hopchain-demo", auto_offset_reset="earliest")
    async def on_order(order: Order) -> None:
        received.append(order)
        console.print(
            f"  [green]consumed[/green] #{order.order_id:02d} {order.quantity} x {order.item}"
        )
        if len(received) >= count:
            all_in.set()

    app = FastStream(broker)
    started = time.monotonic()
    await app.start()
    try:
        for n in range(1, count + 1):
            order = Order(order_id=n, item=ITEMS[n % len(ITEMS)], quantity=1 + n % 3)
            await broker.publish(order, topic, key=str(n).encode())
            console.print(f"[cyan]published[/cyan] #{n:02d} {order.quantity} x {order.item}")
        try:
            await asyncio.wait_for(all_in.wait(), timeout=30)
        except TimeoutError:
            console.print(f"[red]timed out with {len(received)} of {count} records[/red]")
        await asyncio.sleep(0.5)  # a duplicate would show up here
    finally:
        await app.stop()

    ids = sorted(order.order_id for order in received)
    table = Table(title="round trip")
    table.add_column("published")
    table.add_column("consumed")
    table.add_column("distinct")
    table.add_column("seconds")
    table.add_row(
        str(count), str(len(ids)), str(len(set(ids))), f"{time.monotonic() - started:.2f}"
    )
    console.print(table)
    if ids != list(range(1, count + 1)):
        console.print("[red]FAILED: the records did not come back exactly once[/red]")
        return 1
    console.print("[bold green]OK: every record came back exactly once[/bold green]")
    return 0


def main() -> int:
    """Parse arguments and run the round trip."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="HOST:PORT of the broker (default: see above)")
    parser.add_argument("--count", type=int, default=20, help="records to send (default 20)")
    args = parser.parse_args()
    try:
        bootstrap = find_bootstrap(args.bootstrap)
    except LocalKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(roundtrip(bootstrap, args.count))


if __name__ == "__main__":
    sys.exit(main())
