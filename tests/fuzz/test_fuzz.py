"""Fuzzing the read path (DESIGN.md principle 13): whatever bytes are in any field of a record,
a reader's only outcomes are its verdicts, never another exception.

``EnvelopeCodec.decode`` accepts a record or refuses it with a ``DecodeError`` carrying a reason
code and a JSON path, in both wire modes, with and without keys. The dead-letter service's
reader indexes every dead letter (salvaged if need be) and reads or refuses every record of
the resolutions topic, without catching an exception of its own.

Three fuzzers, each for a fixed number of executions from fixed seeds (``HOPCHAIN_SOAK=1``, as
in ``make soak``, runs them far longer): the coverage-guided one (atheris, in a process of its
own; see ``run.py``), the same structure-aware mutations without coverage, and hypothesis.
Crashes already kept as vectors (``fuzz_targets.KNOWN_CRASHES``) are tolerated; any other
fails the test, with a reproduction.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fuzz_cases import CODEC, DLQ, TARGETS, Case, case_json, seeds
from fuzz_mutations import mutate
from fuzz_targets import KNOWN_CRASHES, outcome, signature
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

SOAK = os.environ.get("HOPCHAIN_SOAK", "").strip() not in {"", "0", "false", "no"}
GUIDED_RUNS = 400_000 if SOAK else 3_000
MUTATED_RUNS = 200_000 if SOAK else 1_500
EXAMPLES = 20_000 if SOAK else 300
RUN = Path(__file__).parent / "run.py"


def verdict(case: Case) -> str:
    """The reader's verdict; a known crash is named, any other exception fails the test."""
    try:
        return outcome(case)
    except Exception as error:  # noqa: BLE001 - any exception is a finding
        where = signature(error)
        if where in KNOWN_CRASHES:
            return f"known crash ({KNOWN_CRASHES[where]})"
        document = json.dumps(case_json(case))[:4000]
        pytest.fail(f"new crash: {where}\nreproduce with this case: {document}")


@pytest.mark.slow
def test_the_coverage_guided_fuzzer_finds_no_new_crash(tmp_path: Path) -> None:
    engine = "atheris" if importlib.util.find_spec("atheris") is not None else "random"
    stats = tmp_path / "stats.json"
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [
            sys.executable,
            str(RUN),
            f"--engine={engine}",
            f"--runs={GUIDED_RUNS}",
            "--seed=1",
            f"--stats={stats}",
            f"--crashes={tmp_path / 'crashes'}",
        ],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    figures = json.loads(stats.read_text(encoding="utf-8")) if stats.exists() else {}
    print(result.stdout)  # noqa: T201 - the figures, shown with -s

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert figures["executions"] == GUIDED_RUNS
    assert figures["unknown_crashes"] == []
    codec, dlq = figures["outcomes"][CODEC], figures["outcomes"][DLQ]
    # Both readers ran, and the mutations reached past the first checks.
    assert codec.get("accepted", 0) > 0
    assert len([verdict for verdict in codec if verdict.startswith("refused:")]) >= 12
    assert {"dead-letter:indexed:hopchain", "dead-letter:salvaged:hopchain"} <= set(dlq)
    assert any(verdict.startswith("resolutions:") for verdict in dlq)


@pytest.mark.parametrize("target", TARGETS)
def test_structure_aware_mutations_of_the_seeds_get_verdicts(target: str) -> None:
    rng = random.Random(f"mutations-{target}")
    pool = seeds(target)
    verdicts: Counter[str] = Counter(verdict(case) for case in pool)
    for _ in range(MUTATED_RUNS):
        verdicts[verdict(mutate(rng.choice(pool), rng))] += 1

    assert sum(verdicts.values()) == MUTATED_RUNS + len(pool)
    if target == CODEC:
        assert verdicts["accepted"] > 0
        assert len([name for name in verdicts if name.startswith("refused:")]) >= 10
    else:
        assert any(name.startswith("dead-letter:salvaged") for name in verdicts)
        assert any(name.startswith("resolutions:") for name in verdicts)


_FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_FUZZ
@given(
    seed=st.sampled_from(seeds(CODEC)),
    rng=st.randoms(use_true_random=False),
    steps=st.integers(1, 6),
    keyed=st.booleans(),
    full_check=st.booleans(),
)
def test_any_mutation_of_a_record_is_accepted_or_refused_with_a_reason(
    seed: Case, rng: random.Random, steps: int, keyed: bool, full_check: bool
) -> None:
    case = mutate(seed, rng, steps)
    case = Case(
        CODEC, case.topic, case.value, case.headers, case.key, case.timestamp_ms, keyed, full_check
    )
    event(verdict(case))


@_FUZZ
@given(
    seed=st.sampled_from(seeds(DLQ)),
    rng=st.randoms(use_true_random=False),
    steps=st.integers(1, 6),
    timestamp_ms=st.one_of(st.just(-1), st.integers(-(2**63), 2**63 - 1)),
    value=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_any_dead_letter_or_resolution_is_indexed_or_refused(
    seed: Case, rng: random.Random, steps: int, timestamp_ms: int, value: bytes | None
) -> None:
    case = mutate(seed, rng, steps)
    event(verdict(case))
    moved = Case(DLQ, case.topic, value, case.headers, case.key, timestamp_ms, case.keyed)
    event(verdict(moved))


@_FUZZ
@given(
    seed=st.sampled_from(seeds(CODEC) + seeds(DLQ)),
    index=st.integers(0, 40),
    # Text, or any bytes as a consumer hands them over (not UTF-8: with surrogateescape).
    name=st.text(max_size=20)
    | st.binary(max_size=20).map(lambda raw: raw.decode(errors="surrogateescape")),
    raw=st.one_of(st.none(), st.binary(max_size=80)),
    twice=st.booleans(),
)
def test_any_header_name_and_value_gets_a_verdict(
    seed: Case, index: int, name: str, raw: bytes | None, twice: bool
) -> None:
    headers = list(seed.headers)
    at = index % (len(headers) + 1)
    headers[at:at] = [(name, raw)] * (2 if twice else 1)
    if headers and index % 3 == 0:
        # The same name with another value: a genuine header's bytes under a new name.
        headers[at] = (headers[-1][0], raw)
    event(
        verdict(Case(seed.target, seed.topic, seed.value, tuple(headers), seed.key, -1, seed.keyed))
    )
