"""Fuzz the read path: ``python tests/fuzz/run.py --seconds 60`` (from the repository root).

Runs the coverage-guided fuzzer (atheris, libFuzzer's engine, with this folder's
structure-aware mutations beside its byte-level ones) over both readers, or one
(``--target codec|dlq``), from the seeds of ``fuzz_cases``, for ``--runs`` executions or
``--seconds``. ``--engine random`` uses the structure-aware mutations alone, without
coverage (where atheris has no wheel). Prints the executions and the outcome counts per
target, and every crash with a one-line reproduction; writes each new crash to ``--crashes``
as a crash vector (the format of ``tests/vectors/crashes``). Exit status 1 when a crash is
not one of ``fuzz_targets.KNOWN_CRASHES``.

``--engine random`` is deterministic for a given ``--seed`` and ``--runs``. The
coverage-guided run starts from the same seeds and random seed every time, but libFuzzer's
coverage feedback is not bit-for-bit reproducible: outcome counts differ by a few per cent
between two runs of the same command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

CODEC, DLQ = "codec", "dlq"


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=[CODEC, DLQ, "all"], default="all")
    parser.add_argument("--engine", choices=["atheris", "random"], default="atheris")
    parser.add_argument("--runs", type=int, default=0, help="stop after this many executions")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long")
    parser.add_argument("--seed", type=int, default=1, help="the fuzzer's random seed")
    parser.add_argument("--crashes", type=Path, default=None, help="write crash vectors here")
    parser.add_argument("--stats", type=Path, default=None, help="write the figures as JSON")
    arguments = parser.parse_args(argv)
    if not arguments.runs and not arguments.seconds:
        arguments.seconds = 10.0
    return arguments


class Campaign:
    """Executions, outcomes and crashes of one run."""

    def __init__(self, arguments: argparse.Namespace) -> None:
        from fuzz_cases import from_bytes  # noqa: PLC0415 - imported under instrumentation
        from fuzz_targets import KNOWN_CRASHES, outcome, signature  # noqa: PLC0415

        self.arguments = arguments
        self.target = None if arguments.target == "all" else arguments.target
        self.from_bytes = from_bytes
        self.outcome = outcome
        self.signature = signature
        self.known = KNOWN_CRASHES
        self.started = time.monotonic()
        self.deadline = self.started + arguments.seconds if arguments.seconds else None
        self.executions = 0
        self.outcomes: dict[str, Counter[str]] = {CODEC: Counter(), DLQ: Counter()}
        self.crashes: dict[str, dict[str, Any]] = {}

    def execute(self, data: bytes) -> None:
        case = self.from_bytes(data, self.target)
        self.executions += 1
        try:
            verdict = self.outcome(case)
        except Exception as error:  # noqa: BLE001 - a crash is what is looked for
            self._crashed(case, error)
            verdict = "CRASH"
        self.outcomes[case.target][verdict] += 1

    def _crashed(self, case: Any, error: Exception) -> None:
        from fuzz_cases import case_json  # noqa: PLC0415

        where = self.signature(error)
        found = self.crashes.setdefault(where, {"count": 0, "case": case, "error": error})
        found["count"] += 1
        if found["count"] > 1 or self.arguments.crashes is None:
            return
        document = case_json(case)
        name = hashlib.sha256(json.dumps(document).encode()).hexdigest()[:12]
        self.arguments.crashes.mkdir(parents=True, exist_ok=True)
        path = self.arguments.crashes / f"{case.target}-{name}.json"
        record = {"name": path.stem, "found": where, "message": str(error)[:300], **document}
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        found["file"] = str(path)

    def done(self) -> bool:
        if self.arguments.runs and self.executions >= self.arguments.runs:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def report(self) -> int:
        seconds = time.monotonic() - self.started
        unknown = sorted(where for where in self.crashes if where not in self.known)
        figures = {
            "engine": self.arguments.engine,
            "seed": self.arguments.seed,
            "executions": self.executions,
            "seconds": round(seconds, 2),
            "outcomes": {
                target: dict(counts.most_common()) for target, counts in self.outcomes.items()
            },
            "crashes": {where: found["count"] for where, found in self.crashes.items()},
            "unknown_crashes": unknown,
        }
        out = sys.stdout
        out.write(
            f"{self.executions} executions in {seconds:.1f} s "
            f"({self.executions / max(seconds, 1e-9):.0f}/s), engine {self.arguments.engine}, "
            f"seed {self.arguments.seed}\n"
        )
        for target, counts in self.outcomes.items():
            total = sum(counts.values())
            out.write(f"{target}: {total} executions\n")
            for verdict, count in counts.most_common():
                out.write(f"  {count:8d}  {verdict}\n")
        for where, found in sorted(self.crashes.items()):
            known = self.known.get(where)
            label = f"known, vector {known}" if known else "NEW"
            out.write(f"crash ({label}, {found['count']}x): {where}: {str(found['error'])[:120]}\n")
            if "file" in found:
                out.write(f"  reproduce: python tests/fuzz/reproduce.py {found['file']}\n")
        if self.arguments.stats is not None:
            self.arguments.stats.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        out.flush()
        return 1 if unknown else 0


def _seed_inputs(target: str | None) -> list[bytes]:
    from fuzz_cases import TARGETS, seeds, to_bytes  # noqa: PLC0415

    chosen = TARGETS if target is None else (target,)
    return [to_bytes(case) for name in chosen for case in seeds(name)]


def _run_random(campaign: Campaign) -> int:
    from fuzz_cases import from_bytes, to_bytes  # noqa: PLC0415
    from fuzz_mutations import mutate  # noqa: PLC0415

    rng = random.Random(campaign.arguments.seed)
    inputs = _seed_inputs(campaign.target)
    for data in inputs:
        campaign.execute(data)
    while not campaign.done():
        case = from_bytes(rng.choice(inputs), campaign.target)
        campaign.execute(to_bytes(mutate(case, rng)))
    return campaign.report()


def _run_atheris(campaign: Campaign) -> int:
    import atheris  # noqa: PLC0415 - optional (Linux wheels only)
    from fuzz_cases import from_bytes, to_bytes  # noqa: PLC0415
    from fuzz_mutations import mutate  # noqa: PLC0415

    target = campaign.target
    # libFuzzer adds what it finds to the corpus folder: a scratch copy of the seeds.
    corpus = Path(tempfile.mkdtemp(prefix="hopchain-fuzz-"))
    for number, data in enumerate(_seed_inputs(target)):
        (corpus / f"seed-{number:03d}").write_bytes(data)

    def one_input(data: bytes) -> None:
        campaign.execute(data)
        if campaign.done():
            # libFuzzer would end the process with exit(): report first, then leave.
            status = campaign.report()
            shutil.rmtree(corpus, ignore_errors=True)
            os._exit(status)

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            mutated: bytes = atheris.Mutate(data, max_size)
            return mutated
        return to_bytes(mutate(from_bytes(data, target), rng))[:max_size]

    flags = [
        sys.argv[0],
        str(corpus),
        f"-seed={campaign.arguments.seed}",
        "-max_len=1000000",
        "-runs=-1",
        "-rss_limit_mb=4096",
        "-print_final_stats=0",
    ]
    atheris.Setup(flags, one_input, custom_mutator=mutator)
    atheris.Fuzz()
    return campaign.report()  # not reached: one_input leaves the process


def main(argv: list[str] | None = None) -> int:
    """Run one fuzzing campaign; returns the exit status."""
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    sys.path.insert(0, str(Path(__file__).parent))
    if arguments.engine == "atheris":
        import atheris  # noqa: PLC0415

        with atheris.instrument_imports(include=["hopchain"]):
            import hopchain.consumers.reader  # noqa: PLC0415 - instrumented
            import hopchain.schemas  # noqa: F401, PLC0415
        campaign = Campaign(arguments)
        return _run_atheris(campaign)
    return _run_random(Campaign(arguments))


if __name__ == "__main__":
    sys.exit(main())
