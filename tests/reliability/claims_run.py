"""Running the claims example as separate stage processes, and accounting for every document.

The three stages run as ``python -m examples.claims.stages STAGE`` processes, exactly as
the demo runs them; the feeder is the example's own. Accounting reads what the topics and
the ledger hold, never what a process says about itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from reliability_support import REPO, TopicTail, table

from examples.claims.feeder import FeedReport
from examples.claims.pipeline import DEAD_LETTER_TOPICS, FILED, TOPICS
from hopchain.schemas import ENVELOPE_HEADER
from hopchain.testing import create_topics, read_to_end

STAGES = ("extract", "classify", "file")
DELIVERED_SCENARIOS = frozenset({"clean", "format", "transient", "ambiguous"})
DEAD_LETTERED_SCENARIOS = {"comprehension": "extraction-team", "unfileable": "claims-ops"}
PAYLOAD_FRAGMENTS = ("claimant:", "POL-", "scanned fax", "damage to a", "Grace Hopper")
"""Text that only ever appears inside payloads: no worker log line may contain it."""

_DLQ = "hopchain-dlq-"
_STOP_WAIT_SECONDS = 20.0
_READY_WAIT_SECONDS = 120.0
"""How long a process may take to start handling SIGTERM (imports, on a loaded machine)."""


async def create_claims_topics(bootstrap: str) -> None:
    """The pipeline's topics with two partitions each, as the demo makes them."""
    await create_topics(bootstrap, *TOPICS, partitions=2, exist_ok=True)
    await create_topics(
        bootstrap,
        *DEAD_LETTER_TOPICS,
        configs={"retention.ms": "-1", "retention.bytes": "-1"},
        exist_ok=True,
    )


def prepare_ledger(run_dir: Path) -> Path:
    """Create the ledger the ``file`` stage writes, with a log of every attempted write.

    Same table as ``examples.claims.stages.Ledger`` (it creates it only if missing), plus a
    trigger that fires for every INSERT, also those the primary key turns away: the log
    tells how many writes reached the ledger, the table how many entries exist.
    """
    path = run_dir / "ledger.sqlite"
    db = sqlite3.connect(path)
    try:
        db.executescript(
            """
            CREATE TABLE entries (idempotency_key TEXT PRIMARY KEY, entry TEXT NOT NULL,
                                  doc_id TEXT NOT NULL, category TEXT NOT NULL);
            CREATE TABLE write_attempts (n INTEGER PRIMARY KEY AUTOINCREMENT,
                                         idempotency_key TEXT NOT NULL);
            CREATE TRIGGER log_write_attempt BEFORE INSERT ON entries
            BEGIN
                INSERT INTO write_attempts (idempotency_key) VALUES (NEW.idempotency_key);
            END;
            """
        )
        db.commit()
    finally:
        db.close()
    return path


@dataclass(frozen=True)
class LedgerView:
    """What the ledger holds after the run."""

    entries: dict[str, str]
    """doc_id -> ledger entry."""
    rows: int
    distinct_docs: int
    write_attempts: int


def read_ledger(path: Path) -> LedgerView:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT doc_id, entry FROM entries").fetchall()
        attempts = db.execute("SELECT COUNT(*) FROM write_attempts").fetchone()[0]
    finally:
        db.close()
    return LedgerView(
        entries=dict(rows),
        rows=len(rows),
        distinct_docs=len({doc for doc, _ in rows}),
        write_attempts=int(attempts),
    )


class StageWorkers:
    """The stage processes of one run; each restart gets a log file of its own."""

    def __init__(self, bootstrap: str, run_dir: Path) -> None:
        self.bootstrap = bootstrap
        self.run_dir = run_dir
        self.logs = run_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.generation: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self.stopped: dict[str, int] = {}
        """Exit codes of the processes :meth:`stop` ended, by name."""

    def start(self, stage: str, name: str | None = None) -> None:
        """Start a process of ``stage``, known as ``name`` (default: the stage's name).

        Several instances of one stage each get a name of their own (``file-2``).
        """
        name = name or stage
        self.generation[name] += 1
        log = (self.logs / f"{name}-{self.generation[name]:03d}.log").open("wb")
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "OTEL_TRACES_EXPORTER": "none",
            "PYTHONUNBUFFERED": "1",
        }
        try:
            self.children[name] = subprocess.Popen(  # noqa: S603 - our interpreter, our module
                [
                    sys.executable,
                    "-m",
                    "examples.claims.stages",
                    stage,
                    "--bootstrap",
                    self.bootstrap,
                    "--run-dir",
                    str(self.run_dir),
                ],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        finally:
            log.close()

    def start_all(self) -> None:
        for stage in STAGES:
            self.start(stage)

    def pause(self, stage: str) -> None:
        """Freeze the stage's process (SIGSTOP) where it is; a kill follows."""
        self.children[stage].send_signal(signal.SIGSTOP)

    async def kill(self, stage: str) -> None:
        """``kill -9`` the stage's process and reap it."""
        child = self.children[stage]
        child.send_signal(signal.SIGKILL)
        await asyncio.to_thread(child.wait)
        self.kills[stage] += 1

    async def stop(self, name: str) -> int:
        """SIGTERM one process (a clean leave of its group); return its exit code.

        Sent once the process handles it: a process still starting on a loaded machine
        would be ended by the signal's default action (exit code -15), not stop cleanly.
        """
        child = self.children.pop(name)
        ready = self.run_dir / "ready" / str(child.pid)
        deadline = time.monotonic() + _READY_WAIT_SECONDS
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110 - a file another process writes
            await asyncio.sleep(0.1)
        child.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(child.wait, _STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            code = await asyncio.to_thread(child.wait)
        self.stopped[name] = code
        return code

    def exited(self) -> dict[str, int]:
        """Stages whose current process ended by itself (not killed by the test)."""
        return {
            stage: code
            for stage, child in self.children.items()
            if (code := child.poll()) is not None
        }

    async def stop_all(self) -> dict[str, int]:
        """SIGTERM every process, SIGKILL what is left after a while; return exit codes."""
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        codes: dict[str, int] = {}
        for stage, child in self.children.items():
            try:
                codes[stage] = await asyncio.to_thread(child.wait, _STOP_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                codes[stage] = await asyncio.to_thread(child.wait)
        return codes

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for path in sorted(self.logs.glob("*.log"))[-6:]:
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def lines_containing(self, fragments: Iterable[str]) -> list[str]:
        wanted = tuple(fragments)
        return [
            f"{path.name}: {line[:300]}"
            for path in sorted(self.logs.glob("*.log"))
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if any(fragment in line for fragment in wanted)
        ]


@dataclass
class ClaimsAccount:
    """Where every document went, from the delivered topic and the dead-letter topics."""

    delivered_records: int = 0
    delivered: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """work item -> envelope ids of its delivered records (one id: duplicates identifiable)."""
    delivered_counts: Counter[str] = field(default_factory=Counter)
    ledger_entries_named: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    dead_letter_records: int = 0
    dead_lettered: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """work item -> owners its dead letters were parked for."""
    rejected_records: int = 0
    rejected: Counter[tuple[str, int, int]] = field(default_factory=Counter)
    """(source topic, partition, offset) of records refused at a boundary."""
    rejected_reasons: Counter[str] = field(default_factory=Counter)

    def add(self, records: Iterable[Any]) -> None:
        for record in records:
            headers = dict(record.headers)
            if record.topic == FILED:
                envelope = json.loads(headers[ENVELOPE_HEADER])
                item = envelope["work_item_id"]
                self.delivered_records += 1
                self.delivered[item].add(envelope["id"])
                self.delivered_counts[item] += 1
                self.ledger_entries_named[item].add(json.loads(record.value)["ledger_entry"])
            elif (raw := headers.get(_DLQ + "envelope")) is not None:
                self.dead_letter_records += 1
                item = json.loads(raw)["work_item_id"]
                self.dead_lettered[item].add(headers[_DLQ + "owner"].decode())
            else:
                self.rejected_records += 1
                source = (
                    headers[_DLQ + "source-topic"].decode(),
                    int(headers[_DLQ + "source-partition"]),
                    int(headers[_DLQ + "source-offset"]),
                )
                self.rejected[source] += 1
                if self.rejected[source] == 1:
                    self.rejected_reasons[headers[_DLQ + "reason"].decode()] += 1

    def accounted(self, report: FeedReport) -> int:
        legacy = report.scenarios["legacy"]
        items = sum(
            1
            for doc, scenario in report.work_items.items()
            if scenario != "legacy" and (doc in self.delivered or doc in self.dead_lettered)
        )
        return items + min(legacy, len(self.rejected))

    def lost(self, report: FeedReport) -> list[str]:
        """Documents sent but found nowhere (legacy ones counted, since they carry no id)."""
        missing = [
            doc
            for doc, scenario in report.work_items.items()
            if scenario != "legacy" and doc not in self.delivered and doc not in self.dead_lettered
        ]
        missing_legacy = report.scenarios["legacy"] - len(self.rejected)
        return missing + [f"(legacy record #{n})" for n in range(max(0, missing_legacy))]

    def misplaced(self, report: FeedReport) -> list[str]:
        """Documents whose outcome is not the one their scenario leads to."""
        wrong = []
        for doc, scenario in report.work_items.items():
            if scenario in DELIVERED_SCENARIOS:
                if doc not in self.delivered or doc in self.dead_lettered:
                    wrong.append(f"{doc} ({scenario}) was not delivered, or also dead-lettered")
            elif scenario in DEAD_LETTERED_SCENARIOS:
                owners = self.dead_lettered.get(doc, set())
                if owners != {DEAD_LETTERED_SCENARIOS[scenario]} or doc in self.delivered:
                    wrong.append(f"{doc} ({scenario}) parked for {sorted(owners)}, delivered?")
        return wrong

    @property
    def delivered_duplicates(self) -> int:
        """Delivered records beyond one per work item."""
        return self.delivered_records - len(self.delivered)

    def repeated_filings(self, forced: set[str]) -> int:
        """Filings that ran again for a work item: each extra filed record, and at least one
        for every item whose filing was killed after its ledger write (``forced``)."""
        return sum(
            max(count - 1, 1 if item in forced else 0)
            for item, count in self.delivered_counts.items()
        )

    @property
    def dead_letter_duplicates(self) -> int:
        """Dead letters beyond one per work item."""
        return self.dead_letter_records - len(self.dead_lettered)

    @property
    def rejected_duplicates(self) -> int:
        """Rejections beyond one per source record."""
        return self.rejected_records - len(self.rejected)


class Tally:
    """Keeps a :class:`ClaimsAccount` up to date while the pipeline runs."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.account = ClaimsAccount()
        self._tail = TopicTail(bootstrap, [FILED, *DEAD_LETTER_TOPICS])

    async def __aenter__(self) -> Self:
        await self._tail.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._tail.__aexit__(*exc)

    async def update(self) -> None:
        self.account.add(await self._tail.poll())

    async def catch_up(self) -> None:
        """Read every topic up to its current end."""
        while not await self._tail.caught_up():
            await self.update()


async def final_account(bootstrap: str) -> ClaimsAccount:
    """Everything the topics hold once the workers stopped, read from the beginning."""
    account = ClaimsAccount()
    account.add(await read_to_end(bootstrap, [FILED, *DEAD_LETTER_TOPICS]))
    return account


async def drain(
    tally: Tally,
    report: FeedReport,
    workers: StageWorkers,
    *,
    within: float,
) -> float:
    """Wait until every document is accounted for; return the seconds it took."""
    started = time.monotonic()
    deadline = started + within
    while True:
        await tally.update()
        if tally.account.accounted(report) >= report.sent:
            return time.monotonic() - started
        if exited := workers.exited():
            raise AssertionError(f"a stage exited by itself: {exited}\n{workers.log_tails()}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"after {within:.0f} s only {tally.account.accounted(report)} of {report.sent} "
                f"documents are accounted for\n{workers.log_tails()}"
            )
        await asyncio.sleep(0.5)


def accounting_table(
    title: str,
    report: FeedReport,
    account: ClaimsAccount,
    ledger: LedgerView,
    extra: list[tuple[str, object]],
    *,
    forced: set[str] | None = None,
) -> str:
    rows: list[tuple[str, object]] = [
        ("sent", report.sent),
        ("delivered (work items)", len(account.delivered)),
        ("dead-lettered (work items)", len(account.dead_lettered)),
        ("rejected at a boundary (records)", len(account.rejected)),
        ("lost", len(account.lost(report))),
        ("duplicates observed downstream", account.delivered_duplicates),
        ("  duplicate dead letters", account.dead_letter_duplicates),
        ("  duplicate rejections", account.rejected_duplicates),
        ("ledger entries (one per delivered item)", ledger.rows),
        ("duplicates suppressed at the ledger (>=)", account.repeated_filings(forced or set())),
        ("  ledger writes refused by the key", ledger.write_attempts - ledger.rows),
        *extra,
    ]
    return table(title, rows)
