"""The confluent-kafka (librdkafka) family: plain ``Consumer`` and ``Producer`` wrapped.

Install with ``pip install 'hopchain[confluent]'``. The same engine as the aiokafka
wrappers; see :mod:`hopchain.middleware.confluent.consumer` for an example.

- :class:`ConfluentEnvelopeConsumer`: validate, park byte for byte, hand over hops; per
  record or a batch at a time (:class:`ConfluentBatches`, :class:`ConfluentBatch`).
- :class:`ConfluentEnvelopeProducer`: send with a validated envelope, refuse otherwise.
- :class:`ConfluentWriter`: the engine's record writer (dead letters) on a ``Producer``,
  acknowledged by librdkafka's delivery reports.
"""

from hopchain.middleware.confluent.batches import ConfluentBatch, ConfluentBatches
from hopchain.middleware.confluent.consumer import ConfluentEnvelopeConsumer
from hopchain.middleware.confluent.delivery import Deliveries
from hopchain.middleware.confluent.producer import ConfluentEnvelopeProducer
from hopchain.middleware.confluent.writer import ConfluentWriter

__all__ = [
    "ConfluentBatch",
    "ConfluentBatches",
    "ConfluentEnvelopeConsumer",
    "ConfluentEnvelopeProducer",
    "ConfluentWriter",
    "Deliveries",
]
