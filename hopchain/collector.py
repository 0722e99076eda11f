"""CPython's garbage collector, set for a process that handles records by the thousand."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["BATCH_COLLECTION_THRESHOLDS", "full_collections_held", "tune_collector"]

BATCH_COLLECTION_THRESHOLDS = (100_000, 20, 20)
"""Allocations between young collections, and collections between older ones, once
:func:`tune_collector` ran (CPython's defaults are 700, 10, 10)."""

_HELD_OLDEST_THRESHOLD = 2**31 - 1
"""The oldest generation's threshold while full collections are held: never reached."""

_held_lock = threading.Lock()
_holders = 0
_thresholds_before = (0, 0, 0)


def tune_collector() -> None:
    """Set the garbage collector for a service that reads records in batches.

    Call it once, after start-up, from the service's own code: it changes the whole process.
    A batch of 500 records keeps each one's record, envelope, payload and headers alive until
    the batch is committed. With CPython's default thresholds that starts a young collection
    every few dozen records and a full one, which walks every object the process holds, every
    few thousand: about an eighth of a batch stage's CPU. This moves what is alive now (the
    modules, contracts and models loaded at start-up) out of every later collection
    (``gc.freeze``) and collects about once per 100,000 new containers. Nothing on hopchain's
    read and write paths makes reference cycles; the few other code makes are still
    collected, later, so memory grows by what those cycles hold until then.
    """
    gc.freeze()  # no collection first: it would cost some 45 ms of start-up, for little
    gc.set_threshold(*BATCH_COLLECTION_THRESHOLDS)


@contextlib.contextmanager
def full_collections_held() -> Iterator[None]:
    """No full collection while the block runs, and young ones as :func:`tune_collector` sets.

    For a rebuild that grows a large, long-lived structure (the in-memory dead-letter
    index): each full collection walks every object the process holds, the index's letters
    too, and CPython starts one whenever the oldest generation has grown by a quarter
    (eleven in a rebuild of 100,000 letters, some 6 of its 50 µs of CPU a letter). A young
    collection every 100,000 allocations rather than 700 spares another 2 µs: a fetch's
    records are then mostly gone before one walks them.

    Held rather than ``gc.freeze`` after each fetch: a freeze keeps whatever is alive then
    out of every later collection, the reader's own client and any caller's objects with
    it, and a reference cycle among them would never be freed after the rebuild. Here
    nothing outlives the block: a cycle made meanwhile waits for the next young collection,
    or the first full one after the block. The index's letters hold only text, numbers and
    frozen records (no cycles), so a letter dropped from it is freed at once by reference
    counting either way.

    Blocks may overlap (two rebuilds in one process): the thresholds are set back to what
    they were before the first when the last one ends, even when it raised.
    """
    global _holders, _thresholds_before  # noqa: PLW0603 - one collector per process
    with _held_lock:
        if _holders == 0:
            _thresholds_before = gc.get_threshold()
            young, middle, _ = BATCH_COLLECTION_THRESHOLDS
            gc.set_threshold(young, middle, _HELD_OLDEST_THRESHOLD)
        _holders += 1
    try:
        yield
    finally:
        with _held_lock:
            _holders -= 1
            if _holders == 0:
                gc.set_threshold(*_thresholds_before)
