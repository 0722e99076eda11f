"""The claims pipeline's contracts and stage policies: its whole failure story in one file.

    partner --> claims.partner.avro --intake--+
    feeder  ---------------------------------> claims.documents --extract--> claims.extracted
             --classify--> claims.classified --file--> claims.filed

- intake reads the claims a partner's portal sends as Avro through a schema registry (a
  producer that knows nothing of hopchain: its records are adopted) and hands them on as
  documents. Its contract names the reader schema it was written for; a record written with
  a schema version that cannot be resolved to it is parked as ``unresolvable_schema``.

- extract reads free text with a (simulated) model. Its output is checked against the
  ``Extracted`` contract; a bad output is retried twice with the validation errors as
  feedback, then dead-lettered to the extraction team.
- classify is retried once, then degrades to the ``unknown`` category: a claim with an
  unknown category can still be filed, and the marker lets downstream readers filter it.
- file writes to the claims ledger: a side effect. It is never retried automatically, it
  passes its idempotency key to the ledger, and it aborts on a systematic failure (the
  ledger refusing access or being unavailable) instead of filling a dead-letter queue.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from pydantic import BaseModel, Field

from hopchain.formats import AvroFormat
from hopchain.middleware.policy import Abort, Backoff, DeadLetter, Degrade, TransportRetry
from hopchain.middleware.stage import Pipeline
from hopchain.schemas import ContractRegistry, ErrorType, TopicContract

# A prefix keeps runs apart on a shared broker (the demo sets it when it reuses one).
PREFIX = os.environ.get("CLAIMS_TOPIC_PREFIX", "")
PARTNER = f"{PREFIX}claims.partner.avro"
DOCUMENTS = f"{PREFIX}claims.documents"
EXTRACTED = f"{PREFIX}claims.extracted"
CLASSIFIED = f"{PREFIX}claims.classified"
FILED = f"{PREFIX}claims.filed"

Category = Literal["auto", "home", "health", "travel", "unknown"]


PARTNER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PartnerClaim",
    "namespace": "claims.partner",
    "fields": [
        {"name": "reference", "type": "string"},
        {"name": "narrative", "type": "string"},
    ],
}
"""The Avro schema intake reads the partner's claims with (its reader schema)."""


class PartnerClaim(BaseModel):
    """A claim as the partner's portal sends it, read with ``PARTNER_SCHEMA``."""

    reference: str = Field(min_length=1, max_length=64)
    narrative: str = Field(min_length=1, max_length=20_000)


class Document(BaseModel):
    """A claim document as it arrives: free text."""

    doc_id: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1, max_length=20_000)


class Extracted(BaseModel):
    """What the extractor must return."""

    doc_id: str = Field(min_length=1, max_length=64)
    claimant: str = Field(min_length=1, max_length=200)
    policy_number: str = Field(pattern=r"^POL-[0-9]{6}$")
    amount_cents: int = Field(ge=0, le=100_000_000)
    summary: str = Field(max_length=500)


class Classified(Extracted):
    """An extracted claim with its line of business."""

    category: Category


class Filed(BaseModel):
    """A claim written to the ledger."""

    doc_id: str
    ledger_entry: str
    category: Category


registry = ContractRegistry(
    [
        TopicContract(
            topic=PARTNER,
            model=PartnerClaim,
            owner="intake-team",
            # The partner's producer does not use hopchain: intake writes the origin hop.
            adopt_bare=True,
            # The registry's address is HOPCHAIN_SCHEMA_REGISTRY_URL, read on first use.
            payload_format=AvroFormat(schema=json.dumps(PARTNER_SCHEMA)),
        ),
        TopicContract(topic=DOCUMENTS, model=Document, owner="intake-team"),
        TopicContract(topic=EXTRACTED, model=Extracted, owner="extraction-team"),
        TopicContract(topic=CLASSIFIED, model=Classified, owner="ml-team"),
        TopicContract(topic=FILED, model=Filed, owner="claims-ops"),
    ]
)

_quick = Backoff(initial=0.02, maximum=0.2, jitter=0.5)

pipeline = Pipeline("claims")

intake = pipeline.stage(
    "intake",
    input=PARTNER,
    output=DOCUMENTS,
    owner="intake-team",
    side_effects_free=True,
    transport=TransportRetry(retries=3, backoff=_quick),
    on_exhausted=DeadLetter(),
)

extract = pipeline.stage(
    "extract",
    input=DOCUMENTS,
    output=EXTRACTED,
    owner="extraction-team",
    side_effects_free=True,
    contract_retries=2,
    transport=TransportRetry(retries=3, backoff=_quick),
    on_exhausted=DeadLetter(),
    rules=(
        "policy_number looks like POL-123456",
        "amount_cents is a whole number of cents",
    ),
)

classify = pipeline.stage(
    "classify",
    input=EXTRACTED,
    output=CLASSIFIED,
    owner="ml-team",
    side_effects_free=True,
    contract_retries=1,
    transport=TransportRetry(retries=3, backoff=_quick),
    on_exhausted=Degrade(
        lambda payload, _failure: Classified(**payload.model_dump(), category="unknown"),
        reason="classifier gave no valid category; filed as unknown for manual review",
    ),
)

file_claim = pipeline.stage(
    "file",
    input=CLASSIFIED,
    output=FILED,
    owner="claims-ops",
    side_effects_free=False,
    idempotent=True,
    transport=TransportRetry(retries=0),
    on_exhausted=DeadLetter(),
    on_error={ErrorType.ENVIRONMENT: Abort(), ErrorType.UNAUTHORIZED: Abort()},
)

TOPICS = (DOCUMENTS, EXTRACTED, CLASSIFIED, FILED)
"""The JSON topics, from the feeder to the ledger."""
AVRO_TOPICS = (PARTNER,)
"""The topics whose payloads are Avro (they need a schema registry)."""
DEAD_LETTER_TOPICS = tuple(registry.dead_letter_topics())
