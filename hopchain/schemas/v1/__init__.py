"""Envelope schema 1 (``SPEC.md`` section 6): still read, and written on request.

Schema-1 envelopes are pretty JSON whose hops carry their own ``digest``, ``prev_digest``,
``seq`` and ``signature``. Everything that knows that format lives in this package; the rest of
hopchain reaches it only through the names below, each use marked ``Schema 1`` where it is
made, so that deleting this folder (and those uses) removes schema 1 when it is retired (a
breaking change).
"""

from hopchain.schemas.v1.chain import append_hop, verify_chain
from hopchain.schemas.v1.codec import degraded_markers, read_record, write_envelope
from hopchain.schemas.v1.digest import genesis_digest

__all__ = [
    "append_hop",
    "degraded_markers",
    "genesis_digest",
    "read_record",
    "verify_chain",
    "write_envelope",
]
