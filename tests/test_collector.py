"""``tune_collector``: the garbage collector of a process that reads records in batches."""

from __future__ import annotations

import gc
import subprocess
import sys

from hopchain.collector import full_collections_held


def test_tune_collector_freezes_start_up_and_raises_the_thresholds() -> None:
    # In a process of its own: the setting is process-wide.
    code = (
        "import gc, hopchain.collector;"
        "before = gc.get_threshold();"
        "hopchain.collector.tune_collector();"
        "print(before, gc.get_threshold(), gc.get_freeze_count() > 1_000)"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    assert result.stdout.split(")", 1)[1].strip() == "(100000, 20, 20) True"
    assert result.stdout.startswith("(700, 10, 10)")


def test_full_collections_are_held_until_the_last_of_overlapping_blocks_ends() -> None:
    before = gc.get_threshold()
    first, second = full_collections_held(), full_collections_held()
    first.__enter__()
    held = gc.get_threshold()
    second.__enter__()
    first.__exit__(None, None, None)  # the first to start ends first: the second still runs

    assert gc.get_threshold() == held
    failed = RuntimeError("the second rebuild failed")
    assert second.__exit__(RuntimeError, failed, None) is False  # the error goes on
    assert gc.get_threshold() == before
    assert held[:2] == (100_000, 20)
    assert held[2] > 10**9
