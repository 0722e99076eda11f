"""The one place the deploy tests build a FastStream broker wrapped with hopchain.

The dashboard's end-to-end test and the unwritable service both come here, so a change of the
middleware's construction API is one edit.
"""

from __future__ import annotations

from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from prometheus_client import CollectorRegistry

from hopchain.config import HopchainConfig
from hopchain.middleware import Hopchain, HopchainMiddleware
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
    config = HopchainConfig(
        kafka_bootstrap=bootstrap,
        dead_letter_attempts=dead_letter_attempts,
        dead_letter_backoff_seconds=dead_letter_backoff,
    )
    engine = Hopchain(
        contracts, component=component, config=config, metrics_registry=metrics_registry
    )
    return KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(engine, group=group)],
        ack_policy=AckPolicy.ACK,
    )
