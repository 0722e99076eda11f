"""Fuzzing the dead-letter service's JSON endpoints with schemathesis, against a live service.

:func:`fuzz_api` runs ``schemathesis run`` in a process of its own (examples, coverage,
fuzzing and stateful phases; valid and invalid inputs) on the OpenAPI document the service
serves at ``/openapi.json``. Every request goes over real HTTP; the HAR report of the run is
read back to count the requests and their statuses, the JSON report for the failed checks.
The same command works against any running service (see the README).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

CHECKS: tuple[str, ...] = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
)
"""What every response is held to: no 5xx, and a status, content type, body and headers that
the document lists for the operation."""

CHECKS = tuple(os.environ.get("HOPCHAIN_API_FUZZ_CHECKS", ",".join(CHECKS)).split(","))
SOAK = os.environ.get("HOPCHAIN_SOAK", "").strip() not in {"", "0", "false", "no"}
EXAMPLES = int(os.environ.get("HOPCHAIN_API_FUZZ_EXAMPLES", "0") or 0) or (500 if SOAK else 40)
"""Test cases per operation and phase: 40 in ``make test``, 500 under ``HOPCHAIN_SOAK=1``;
``HOPCHAIN_API_FUZZ_EXAMPLES`` sets any other number."""

SEED = int(os.environ.get("HOPCHAIN_API_FUZZ_SEED", "0") or 0) or None
"""A seed to repeat a run with (every run prints its own); a new one by default."""


@dataclass
class FuzzReport:
    """What one run sent and saw."""

    seed: int
    exit_code: int
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""

    @property
    def server_errors(self) -> int:
        """Responses with a 5xx status."""
        return sum(count for status, count in self.statuses.items() if status >= 500)

    def summary(self, documented: set[str]) -> str:
        """One line for the terminal summary; ``documented``: ``METHOD /path`` of each operation."""
        statuses = ", ".join(f"{status}: {n}" for status, n in sorted(self.statuses.items()))
        listed = sum(n for name, n in self.operations.items() if name in documented)
        return (
            f"API fuzzing (schemathesis run, {EXAMPLES} examples per operation, seed "
            f"{self.seed}): {self.requests} requests in {self.seconds:.1f} s, {listed} of them "
            f"to the {len(documented & set(self.operations))} documented operations (the rest "
            f"try methods the document does not list); {self.server_errors} server errors, "
            f"{len(self.failures)} failed checks (statuses {statuses})"
        )


async def fuzz_api(
    base_url: str, token: str, operations: dict[str, str], *, examples: int = EXAMPLES
) -> FuzzReport:
    """Fuzz every operation of the document served at ``base_url``/openapi.json.

    Args:
        base_url: where the service answers.
        token: its bearer token, sent with every request.
        operations: path template by path pattern (``/dead-letters/{dead_letter_id}`` by
            ``/dead-letters/[^/]+``), to count the requests per operation.
        examples: test cases per operation and phase.
    """
    seed = SEED if SEED is not None else int.from_bytes(os.urandom(4), "big")
    with tempfile.TemporaryDirectory(prefix="hopchain-api-fuzz-") as folder:
        har, summary = Path(folder, "run.har"), Path(folder, "run.json")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{base_url}/openapi.json",
            f"--checks={','.join(CHECKS)}",
            f"--max-examples={examples}",
            f"--seed={seed}",
            "--workers=1",
            "--continue-on-failure",
            "--no-color",
            f"--header=Authorization: Bearer {token}",
            "--report=har,json",
            f"--report-har-path={har}",
            f"--report-json-path={summary}",
            "--output-truncate=false",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=folder,
            env={**os.environ, "NO_COLOR": "1"},
        )
        output, _ = await process.communicate()
        assert process.returncode is not None
        report = FuzzReport(seed=seed, exit_code=process.returncode, output=output.decode())
        _read_har(report, json.loads(await asyncio.to_thread(har.read_text)), operations)
        _read_summary(report, json.loads(await asyncio.to_thread(summary.read_text)))
    return report


def _read_har(report: FuzzReport, har: dict[str, object], operations: dict[str, str]) -> None:
    patterns = [(re.compile(f"^{pattern}$"), name) for pattern, name in operations.items()]
    entries = har["log"]["entries"]  # type: ignore[index]
    for entry in entries:
        request, response = entry["request"], entry["response"]
        report.requests += 1
        path = urlsplit(request["url"]).path
        name = next((name for regex, name in patterns if regex.match(path)), path)
        report.operations[f"{request['method']} {name}"] += 1
        if response.get("status"):
            report.statuses[int(response["status"])] += 1


def _read_summary(report: FuzzReport, summary: dict[str, object]) -> None:
    report.seconds = float(summary["running_time"])  # type: ignore[arg-type]
    for failure in summary["failures"]:  # type: ignore[attr-defined]
        report.failures.append(
            f"{failure['title']} ({failure['count']} times) in {', '.join(failure['operations'])}"
        )
