"""What the FastStream adapter's parts need of each other, as Protocols.

The per-record middleware and the batch code reach the factory that made them only through
:class:`MiddlewareOwner`, never through the factory's class.
"""

from __future__ import annotations

from typing import Protocol

from hopchain.exceptions import ConfigurationError
from hopchain.middleware.engine import Hopchain, RecordWriter
from hopchain.middleware.faststream.commits import BatchedCommits
from hopchain.middleware.faststream.family import BrokerFamily, Rereading
from hopchain.middleware.faststream.holds import PartitionHolds
from hopchain.middleware.outage import RegistryBackoff

__all__ = ["MiddlewareOwner"]


class MiddlewareOwner(Protocol):
    """What a record's middleware needs of the factory that made it (``HopchainMiddleware``)."""

    hopchain: Hopchain
    writer: RecordWriter
    refusal: ConfigurationError | None
    group: str
    commits: BatchedCommits
    holds: PartitionHolds
    outage: RegistryBackoff
    server_address: str | None
    client_id: str | None
    family: BrokerFamily
    rereading: Rereading | None

    @property
    def owns_commits(self) -> bool:
        """Whether hopchain commits the offsets (batched mode, checked subscribers)."""
        ...
