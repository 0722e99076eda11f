"""The client-neutral engine: consume, publish, settle, and write dead letters.

Nothing here imports a Kafka client or an adapter; the FastStream middleware and the
aiokafka wrapper are thin layers over :class:`Hopchain`.
"""

from hopchain.middleware.engine.abort import AbortState
from hopchain.middleware.engine.batch import Batch
from hopchain.middleware.engine.batches import Batches
from hopchain.middleware.engine.core import Hopchain
from hopchain.middleware.engine.settle import Settled
from hopchain.middleware.engine.verdict import Received, Verdict
from hopchain.middleware.engine.writer import DeadLetterWriter, OutgoingRecord, RecordWriter

__all__ = [
    "AbortState",
    "Batch",
    "Batches",
    "DeadLetterWriter",
    "Hopchain",
    "OutgoingRecord",
    "Received",
    "RecordWriter",
    "Settled",
    "Verdict",
]
