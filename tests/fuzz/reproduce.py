"""Read crash vectors again: ``python tests/fuzz/reproduce.py tests/vectors/crashes/*.json``.

Prints each vector's verdict now, or the traceback of the crash, and the verdict expected.
Exit status 1 when any vector does not reach its expected verdict.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path


def main(paths: list[str]) -> int:
    """Read each crash vector; returns the exit status."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fuzz_cases import case_of  # noqa: PLC0415 - after the folder is on the path
    from fuzz_targets import outcome, reaches  # noqa: PLC0415

    status = 0
    for path in paths:
        vector = json.loads(Path(path).read_text(encoding="utf-8"))
        try:
            verdict = outcome(case_of(vector))
        except Exception:  # noqa: BLE001 - shown, not raised
            sys.stdout.write(f"{path}: CRASH\n{traceback.format_exc()}")
            status = 1
            continue
        good = reaches(verdict, vector.get("expect"))
        status = status or (0 if good else 1)
        sys.stdout.write(f"{path}: {verdict} (expected {vector.get('expect')}: {good})\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
