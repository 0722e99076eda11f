"""The FastStream adapter: validate before the handler, park what fails, append on publish.

Put a :class:`HopchainMiddleware` on a ``KafkaBroker`` (or a ``KafkaRouter``) of
``faststream.kafka`` or ``faststream.confluent`` (see
:mod:`~hopchain.middleware.faststream.confluent` for how that one commits), and let
:meth:`HopchainMiddleware.app` build the application::

    middleware = HopchainMiddleware(Hopchain(registry, component="classify"))
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=middleware.ack_policy)
    app = middleware.app(broker)  # check + prepare on start-up, close on shutdown

Commits, by default (``HOPCHAIN_COMMITS=auto`` with subscribers on ``AckPolicy.MANUAL``,
which ``middleware.ack_policy`` gives): hopchain commits.
Outputs and dead letters are sent without waiting (a ``broker.publish`` in a handler returns
the send's future), and per partition the offset below which every record is settled is
committed in batches, on revocation (``listener=middleware.listener()``, or ``on_revoke=``
on ``faststream.confluent``), on :meth:`~HopchainMiddleware.close` and on abort (see
:mod:`hopchain.middleware.faststream.ledger`). A failed send pauses and rewinds its
partition only. A middleware that was never checked refuses its first record, in one line,
and reads no further.

Per record (``HOPCHAIN_COMMITS=record``, or subscribers on ``AckPolicy.ACK``), on
FastStream's public acknowledgement API: a record's offset is committed (``AckMessage``)
after its handler returned and its outputs were acknowledged, or after it was parked and
the dead-letter write was acknowledged. A record that could not be parked is not committed:
FastStream's ``NackMessage`` rewinds the consumer to it, and its partition alone is paused
for a second before it is tried again (the subscriber's other partitions keep flowing), so
it is never dropped. When a stage aborts, the record is rewound and every partition of that
consumer is paused: nothing later is read or committed, and a restart resumes at the record.

On a report-only topic (``TopicContract(report_only=True)`` or ``HOPCHAIN_REPORT_ONLY``), a
record that breaks its contract is counted (``hopchain_would_reject_total``), logged and
handed to the handler as if hopchain were not there; nothing is parked.

FastStream publishes a handler's return value after the consume scope has ended; if that
publish fails, the record is not committed either. An output hopchain refuses to send
(``EnvelopeRejected``) parks the record as a ``contract_violation``; any other failure
rewinds the consumer to the record, which is handled again after a short pause of its
partition.

Dead letters keep the original headers byte for byte, which FastStream's publish API cannot
express, so they are written with a producer the middleware owns (:class:`KafkaWriter`,
connected with ``HOPCHAIN_KAFKA_BOOTSTRAP`` and the login settings). Under FastStream's
``TestKafkaBroker`` pass ``writer=BrokerWriter(broker)`` to park through the test broker.
"""

from hopchain.middleware.faststream.factory import HopchainMiddleware
from hopchain.middleware.faststream.holds import RETRY_PAUSE_SECONDS
from hopchain.middleware.faststream.message import RecordMiddleware
from hopchain.middleware.faststream.publish import BrokerWriter

__all__ = ["RETRY_PAUSE_SECONDS", "BrokerWriter", "HopchainMiddleware", "RecordMiddleware"]
