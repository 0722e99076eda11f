"""The claims pipeline's contracts and stage policies: its whole failure story in one file.

    feeder --> claims.documents --extract--> claims.extracted --classify--> claims.classified
                                                                   --file--> claims.filed

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

import os
from typing import Literal

from pydantic import BaseModel, Field

from hopchain.middleware.policy import Abort, Backoff, DeadLetter, Degrade, TransportRetry
from hopchain.middleware.stage import Pipeline
from hopchain.schemas import ContractRegistry, ErrorType, TopicContract

# A prefix keeps runs apart on a shared broker (the demo sets it when it reuses one).
PREFIX = os.environ.get("CLAIMS_TOPIC_PREFIX", "")
DOCUMENTS = f"{PREFIX}claims.documents"
EXTRACTED = f"{PREFIX}claims.extracted"
CLASSIFIED = f"{PREFIX}claims.classified"
FILED = f"{PREFIX}claims.filed"

Category = Literal["auto", "home", "health", "travel", "unknown"]


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
        TopicContract(topic=DOCUMENTS, model=Document, owner="intake-team"),
        TopicContract(topic=EXTRACTED, model=Extracted, owner="extraction-team"),
        TopicContract(topic=CLASSIFIED, model=Classified, owner="ml-team"),
        TopicContract(topic=FILED, model=Filed, owner="claims-ops"),
    ]
)

_quick = Backoff(initial=0.02, maximum=0.2, jitter=0.5)

pipeline = Pipeline("claims")

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
DEAD_LETTER_TOPICS = tuple(registry.dead_letter_topics())
