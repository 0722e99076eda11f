"""The one place the deploy tests build a FastStream broker wrapped with hopchain.

The dashboard's end-to-end test and the unwritable service both come here, so a change of the
middleware's construction API is one edit.
"""

from __future__ import annotations

from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from prometheus_client import CollectorRegistry

from hopchain.middleware import HopchainRuntime
from hopchain.schemas import ContractRegistry


def hopchain_broker(
    bootstrap: str,
    contracts: ContractRegistry,
    *,
    component: str,
    group: str,
    metrics_registry: CollectorRegistry | None = None,
    dead_letter_attempts: int = 3,
    dead_letter_backoff: float = 0.2,
) -> KafkaBroker:
    """A broker that runs ``component`` under hopchain and commits after processing."""
    del group  # the consumer group is the subscriber's; this middleware does not need it
    runtime = HopchainRuntime(
        contracts,
        component=component,
        metrics_registry=metrics_registry,
        dead_letter_attempts=dead_letter_attempts,
        dead_letter_backoff=dead_letter_backoff,
    )
    return KafkaBroker(bootstrap, middlewares=[runtime], ack_policy=AckPolicy.ACK)
