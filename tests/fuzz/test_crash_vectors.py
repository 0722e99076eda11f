"""Every crash the fuzzers found stays a regression vector (``tests/vectors/crashes``).

Each vector is one record (bytes in base64) and the verdict the reader owes it: a refusal
(with one of the listed reason codes, or any code when none is listed) or an index entry.
Vectors that still crash the schema-2 reader are marked, one by one, as expected failures:
when the reader is fixed they pass, and the strict mark fails until it is removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzz_cases import CRASH_VECTORS, case_of
from fuzz_targets import KNOWN_CRASHES, outcome, reaches

FILES = sorted(CRASH_VECTORS.glob("*.json"))
CRASHING_TODAY: dict[str, type[Exception]] = {}
"""Vectors the schema-2 reader still crashes on (expected failures); none is left."""


def load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return vector


def _param(path: Path) -> Any:
    error = CRASHING_TODAY.get(path.stem)
    if error is None:
        return pytest.param(path, id=path.stem)
    mark = pytest.mark.xfail(
        strict=True, raises=error, reason=f"the schema-2 reader raises {error.__name__}"
    )
    return pytest.param(path, id=path.stem, marks=mark)


@pytest.mark.parametrize("path", [_param(path) for path in FILES])
def test_each_crash_vector_gets_its_verdict(path: Path) -> None:
    vector = load(path)

    verdict = outcome(case_of(vector))

    assert reaches(verdict, vector["expect"]), (verdict, vector["expect"])


def test_the_vectors_are_well_formed_and_cover_both_readers() -> None:
    vectors = [load(path) for path in FILES]

    assert {vector["target"] for vector in vectors} == {"codec", "dlq"}
    for path, vector in zip(FILES, vectors, strict=True):
        assert vector["name"] == path.stem
        assert vector["description"]
        assert vector["found"]
        assert vector["expect"]["verdict"] in {"refused", "dead-letter"}
    assert set(CRASHING_TODAY) <= {path.stem for path in FILES}


def test_every_known_crash_has_its_vector() -> None:
    names = {path.stem for path in FILES}

    assert set(KNOWN_CRASHES.values()) <= names
    assert set(KNOWN_CRASHES.values()) <= set(CRASHING_TODAY)
