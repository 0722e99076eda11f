"""Reading dead letters into index values, one at a time and a fetch at a time, in process.

The part of the dead-letter index's rebuild that reading a letter's headers costs, without
Kafka or the index: ``read_letter_fields`` called for each record (the Python reader of the
``hopchain-dlq-*`` headers) beside ``read_letters_fields`` on 1,000 records a call (as the
service calls it: the compiled core reads the headers of all of them, when it is built), on
the same records in the same run. The records are made as ``bench/dlq_rebuild.py`` makes
them: 3 owners, 5 error types, half with an envelope.

Times are CPU microseconds per letter (``time.process_time_ns``), the median of
``--repeats`` repeats, garbage collection paused, the two timed in turn within each repeat
(``bench.core_cycle.measure_together``).

    python -m bench.dlq_read [--count 20000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from aiokafka.structs import ConsumerRecord

from bench.core_cycle import measure_together
from bench.dlq_rebuild import ERROR_TYPES, OWNERS
from hopchain.consumers.records import read_letter_fields, read_letters_fields
from hopchain.testing.deadletters import envelope_for, synthetic_dead_letter

LETTERS_PER_CALL = 1000
"""As the service's applier: a partition's letters are read a thousand at a time."""


def consumed(count: int) -> list[Any]:
    """``count`` dead letters as the consumer gets them from one dead-letter topic."""
    rng = random.Random(7)
    now = time.time()
    envelope = envelope_for("orders")
    records = []
    for number in range(count):
        letter = synthetic_dead_letter(
            owner=OWNERS[number % len(OWNERS)],
            source_topic="orders",
            error_type=rng.choice(ERROR_TYPES),
            parked_at=now - rng.uniform(60.0, 6 * 3600.0),
            envelope=envelope if number % 2 else None,
            key=f"order-{number}".encode(),
            source_offset=number,
        )
        records.append(
            ConsumerRecord(
                topic="orders.dlq",
                partition=0,
                offset=number,
                timestamp=int(now * 1000),
                timestamp_type=1,
                key=letter.key,
                value=letter.value,
                checksum=None,
                serialized_key_size=len(letter.key or b""),
                serialized_value_size=len(letter.value or b""),
                headers=list(letter.headers),
            )
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="dead letters")
    parser.add_argument("--repeats", type=int, default=9, help="repeats per figure (median)")
    arguments = parser.parse_args()
    records = consumed(arguments.count)
    chunks = [
        records[start : start + LETTERS_PER_CALL]
        for start in range(0, len(records), LETTERS_PER_CALL)
    ]
    one_by_one = [read_letter_fields(raw, "team") for raw in records]
    batched = [fields for chunk in chunks for fields in read_letters_fields(chunk, "team")]
    if one_by_one != batched:
        msg = "the batch reader's values differ from the one-by-one reader's"
        raise AssertionError(msg)

    def each() -> object:
        return [read_letter_fields(raw, "team") for raw in records]

    def in_batches() -> object:
        return [read_letters_fields(chunk, "team") for chunk in chunks]

    print(f"{len(records):,} dead letters, CPU µs per letter, median of {arguments.repeats}:")
    figures = measure_together({"each": each, "in batches": in_batches}, arguments.repeats)
    per_record, per_batch = (figures[name] / len(records) for name in ("each", "in batches"))
    print(f"  read_letter_fields, one at a time: {per_record:.2f} ({1e6 / per_record:,.0f}/s)")
    print(
        f"  read_letters_fields, {LETTERS_PER_CALL:,} a call: {per_batch:.2f} "
        f"({1e6 / per_batch:,.0f}/s)"
    )
    print(f"  ratio {per_batch / per_record:.2f}")


if __name__ == "__main__":
    main()
