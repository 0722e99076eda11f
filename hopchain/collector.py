"""CPython's garbage collector, set for a process that handles records by the thousand."""

from __future__ import annotations

import gc

__all__ = ["BATCH_COLLECTION_THRESHOLDS", "tune_collector"]

BATCH_COLLECTION_THRESHOLDS = (100_000, 20, 20)
"""Allocations between young collections, and collections between older ones, once
:func:`tune_collector` ran (CPython's defaults are 700, 10, 10)."""


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
