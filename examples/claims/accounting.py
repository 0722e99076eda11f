"""Counting where every document went, from what the topics hold."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pydantic import ValidationError

from examples.claims.pipeline import DEAD_LETTER_TOPICS, FILED, intake
from hopchain.schemas import ENVELOPE_HEADER, Decision, Envelope
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import read_to_end


@dataclass
class Accounting:
    """Outcomes read back from Kafka."""

    delivered: set[str] = field(default_factory=set)
    delivered_records: int = 0
    recovered: set[str] = field(default_factory=set)
    degraded: set[str] = field(default_factory=set)
    from_partner: set[str] = field(default_factory=set)
    """Delivered work items that came in through intake, as the partner's Avro."""
    dead_lettered: Counter[tuple[str, str]] = field(default_factory=Counter)
    dead_lettered_items: set[str] = field(default_factory=set)
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    rejected_from: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Records refused at a boundary by (source topic, reason code)."""
    dead_letter_ids: list[str] = field(default_factory=list)
    parked_envelopes: dict[str, str] = field(default_factory=dict)
    """Envelope id of each parked record that had one, by dead-letter topic (the last seen)."""
    parked_by_label: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Dead letters by (owner, source topic, error type): what the service's depth shows."""

    @property
    def rejected_total(self) -> int:
        """Records refused at a boundary (no readable envelope)."""
        return sum(self.rejected.values())

    @property
    def accounted(self) -> int:
        """Documents whose fate is known."""
        return len(self.delivered) + len(self.dead_lettered_items) + self.rejected_total

    @property
    def duplicates(self) -> int:
        """Delivered records beyond one per work item (redeliveries)."""
        return self.delivered_records - len(self.delivered)


def _envelope(raw: bytes | None) -> Envelope | None:
    if not raw:
        return None
    try:
        return load_envelope(raw)
    except ValidationError:
        return None


async def account(bootstrap: str) -> Accounting:
    """Read the delivered topic and every dead-letter topic to their current ends."""
    result = Accounting()
    for record in await read_to_end(bootstrap, [FILED]):
        envelope = _envelope(dict(record.headers).get(ENVELOPE_HEADER))
        if envelope is None:
            continue
        item = envelope.work_item_id
        result.delivered_records += 1
        result.delivered.add(item)
        if any(hop.decision is Decision.RECOVERED for hop in envelope.chain):
            result.recovered.add(item)
        if envelope.degradations:
            result.degraded.add(item)
        if envelope.chain and envelope.chain[0].component == intake.name:
            result.from_partner.add(item)
    for record in await read_to_end(bootstrap, list(DEAD_LETTER_TOPICS)):
        info = read_dead_letter_headers(list(record.headers))
        result.dead_letter_ids.append(info.dead_letter_id)
        result.parked_by_label[(info.owner, info.source_topic, info.error_type.value)] += 1
        if info.envelope is not None:
            result.parked_envelopes[record.topic] = info.envelope.id
        if info.reason is not None or info.envelope is None:
            reason = info.reason.value if info.reason else "unreadable"
            result.rejected[(reason, info.owner)] += 1
            result.rejected_from[(info.source_topic, reason)] += 1
        else:
            result.dead_lettered[(info.error_type.value, info.owner)] += 1
            result.dead_lettered_items.add(info.envelope.work_item_id)
    return result
