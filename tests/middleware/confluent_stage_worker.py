"""A stage on FastStream's confluent broker, in a process of its own (a kill -9 target).

Run as ``python confluent_stage_worker.py --bootstrap ... --input ... --output ... --group ...
--ack-policy ACK|MANUAL``:
built as the README says (``middleware.app(broker)``), it forwards each valid record of the
input to the output, appending its hop, and parks the rest. It prints ``ready`` once started
and ``handled <id>`` per record forwarded; SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from faststream import AckPolicy
from faststream.confluent import KafkaBroker
from middleware_helpers import Doc, contract, registry

from hopchain import Hopchain, HopchainMiddleware


async def serve(arguments: argparse.Namespace) -> None:
    contracts = registry(contract(arguments.input), contract(arguments.output))
    middleware = HopchainMiddleware(Hopchain(contracts, component="relay"), group=arguments.group)
    policy = AckPolicy[arguments.ack_policy]  # ACK: per record; MANUAL: hopchain batches
    broker = KafkaBroker(arguments.bootstrap, middlewares=[middleware], ack_policy=policy)

    @broker.subscriber(
        arguments.input,
        group_id=arguments.group,
        auto_offset_reset="earliest",
        # A killed member holds its partitions until its session expires: keep that short.
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    @broker.publisher(arguments.output)
    async def relay(item: Doc) -> Doc:
        print(f"handled {item.id}", flush=True)  # noqa: T201
        return item

    app = middleware.app(broker, after_startup=[lambda: print("ready", flush=True)])  # noqa: T201
    await app.run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option in ("--bootstrap", "--input", "--output", "--group", "--ack-policy"):
        parser.add_argument(option, required=True)
    asyncio.run(serve(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
