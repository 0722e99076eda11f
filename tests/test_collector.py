"""``tune_collector``: the garbage collector of a process that reads records in batches."""

from __future__ import annotations

import subprocess
import sys


def test_tune_collector_freezes_start_up_and_raises_the_thresholds() -> None:
    # In a process of its own: the setting is process-wide.
    code = (
        "import gc, hopchain;"
        "before = gc.get_threshold();"
        "hopchain.tune_collector();"
        "print(before, gc.get_threshold(), gc.get_freeze_count() > 1_000)"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    assert result.stdout.split(")", 1)[1].strip() == "(100000, 20, 20) True"
    assert result.stdout.startswith("(700, 10, 10)")
