"""What the ``hopchain dlq`` commands do once their flags are read.

Imported only when a ``dlq`` command runs (see :mod:`hopchain.cli.dlq`), so that ``hopchain
--help`` loads neither aiokafka nor the dead-letter stack. Every known failure ends the
command with one line on stderr and its exit status: 1 failed (Kafka unreachable), 2 an
invalid flag or variable, 4 not found, 5 refused (including a reference dead letter whose
original the source topic no longer holds, or holds with other bytes).
"""

from __future__ import annotations

import asyncio
import functools
import getpass
import itertools
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer
from aiokafka.errors import KafkaError
from rich.console import Console

from hopchain.cli.common import ExitCode, fail, kafka_failure, load_config, quiet_kafka_client
from hopchain.cli.output import console
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.detail import DeadLetterDetail, inspect_dead_letter
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.filters import DeadLetterFilter, parse_duration
from hopchain.consumers.index import Pair
from hopchain.consumers.reader import Snapshot, load_index
from hopchain.consumers.render import (
    detail_view,
    list_table,
    redrive_lines,
    resolution_json,
    resolution_text,
)
from hopchain.consumers.store import LetterStore
from hopchain.consumers.triage import Triage
from hopchain.exceptions import ConfigurationError

__all__ = [
    "Resolve",
    "Source",
    "choose",
    "discard",
    "list_letters",
    "redrive",
    "serve",
    "show",
    "who_is",
]

T = TypeVar("T")

TABLE_LIMIT = 200
"""Rows ``hopchain dlq list`` prints for people unless --limit says otherwise."""

Outcome = dict[str, list[dict[str, Any]]]


@functools.cache
def _console(*, stderr: bool = False) -> Console:
    return console(stderr=stderr)


@dataclass(frozen=True)
class Source:
    """Where the dead letters are read from: the flags every reading command shares."""

    bootstrap: str | None = None
    contracts: str | None = None
    pattern: str | None = None
    dlq_topics: tuple[str, ...] = ()
    resolutions_topic: str | None = None

    def settings(self, **more: tuple[str, object]) -> DlqSettings:
        """The configuration, flags over variables; one line and exit 2 if invalid."""
        return load_config(
            kafka_bootstrap=("--bootstrap", self.bootstrap),
            contracts=("--contracts", self.contracts),
            dlq_topic_pattern=("--pattern", self.pattern),
            dlq_topics=("--dlq-topic", _topic_owners(self.dlq_topics)),
            dlq_resolutions_topic=("--resolutions-topic", self.resolutions_topic),
            **more,
        )


def _topic_owners(specs: tuple[str, ...]) -> dict[str, str] | None:
    """``--dlq-topic NAME[=OWNER]`` values as topics by owner (``unknown`` when not given)."""
    if not specs:
        return None
    topics: dict[str, str] = {}
    for spec in specs:
        name, _, owner = spec.partition("=")
        if not name.strip():
            fail(f"--dlq-topic {spec!r}: expected NAME or NAME=OWNER", ExitCode.USAGE)
        topics[name.strip()] = owner.strip() or "unknown"
    return topics


def choose(
    owner: str | None, source_topic: str | None, error_type: str | None, min_age: str | None
) -> DeadLetterFilter:
    """The filter of --owner, --source-topic, --error-type and --min-age."""
    try:
        seconds = parse_duration(min_age) if min_age is not None else None
    except ValueError as exc:
        fail(f"--min-age: {exc}", ExitCode.USAGE)
    return DeadLetterFilter(
        owner=owner,
        source_topic=source_topic,
        error_type=error_type,
        min_age_seconds=seconds,
    )


def who_is(who: str | None) -> str:
    """--who, or the user running the command."""
    name = who or os.environ.get("USER")
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            fail("cannot tell who you are; pass --who NAME", ExitCode.USAGE)
    return name


def _run(settings: DlqSettings, coroutine: Awaitable[T]) -> T:
    """Run a coroutine, turning known errors into one line and an exit status."""

    async def main() -> T:
        return await coroutine

    try:
        return asyncio.run(main())
    except ConfigurationError as exc:
        fail(str(exc), ExitCode.USAGE)
    except DeadLetterNotFound as exc:
        fail(str(exc), ExitCode.NOT_FOUND)
    except TriageRefused as exc:
        fail(str(exc), ExitCode.REFUSED)
    except TriageError as exc:
        fail(str(exc), ExitCode.FAILURE)
    except (KafkaError, OSError, TimeoutError) as exc:
        fail(kafka_failure(exc, settings.kafka_bootstrap), ExitCode.FAILURE)


async def _with_triage(
    settings: DlqSettings,
    timeout: float,  # noqa: ASYNC109 - bounds the rebuild
    action: Callable[[Snapshot, Triage], Awaitable[T]],
) -> T:
    snapshot = await load_index(settings, timeout=timeout)
    triage = Triage(settings, snapshot.index)
    await triage.start()
    try:
        return await action(snapshot, triage)
    finally:
        await triage.stop()


def _echo_json(body: Any) -> None:
    typer.echo(json.dumps(body, indent=2, sort_keys=True))


def serve(settings: DlqSettings) -> int:
    """Run the dead-letter service until it is stopped; its exit status."""
    from hopchain.consumers.service import serve as serve_forever  # noqa: PLC0415 - dlq extra

    return _run(settings, serve_forever(settings))


def list_letters(
    source: Source,
    chosen: DeadLetterFilter,
    *,
    include_resolved: bool,
    limit: int | None,
    timeout: float,
    json_output: bool,
    index_path: str | None = None,
) -> None:
    """``dlq list``: unresolved (or all) dead letters, oldest first, printed as they are read.

    The topics are read into a temporary index file (memory stays bounded whatever their
    depth); with ``index_path``, a service's index file is read instead, without Kafka.
    """
    settings = source.settings()
    quiet_kafka_client()
    with tempfile.TemporaryDirectory(prefix="hopchain-dlq-list-") as folder:
        store = LetterStore(index_path or Path(folder) / "index.sqlite")
        try:
            if index_path is not None:
                _run(settings, asyncio.to_thread(store.open_read_only))
                read = f"read from the index file {index_path}"
            else:
                store.open()
                snapshot = _run(settings, load_index(settings, timeout=timeout, index=store))
                read = (
                    f"{snapshot.records_read} records read from {len(snapshot.topics)} "
                    f"dead-letter topic(s) in {snapshot.seconds:.1f} s"
                )
            _print_letters(
                store,
                chosen,
                include_resolved=include_resolved,
                limit=limit,
                json_output=json_output,
                read=read,
            )
        finally:
            store.close()


def _print_letters(
    index: LetterStore,
    chosen: DeadLetterFilter,
    *,
    include_resolved: bool,
    limit: int | None,
    json_output: bool,
    read: str,
) -> None:
    now = time.time()
    resolved = None if include_resolved else False
    letters: Iterator[Pair] = index.scan(chosen, now=now, resolved=resolved)
    if limit is not None or not json_output:
        letters = itertools.islice(letters, limit or TABLE_LIMIT)
    if json_output:
        _stream_json(
            {**letter.as_json(), "resolution": resolution_json(resolution)}
            for letter, resolution in letters
        )
        return
    shown = list(letters)
    total = index.count(chosen, now=now, resolved=resolved)
    _console().print(list_table(shown, now, include_resolved=include_resolved))
    references = sum(letter.reference is not None for letter, _ in shown)
    if references:
        _console().print(
            f"{references} of these are references (REASON ends in '(reference)'): the record "
            "was too large to park, so the dead letter holds no value. `hopchain dlq show ID` "
            "says where the original is; redrive re-reads it from there while the source "
            "topic retains it, and refuses (exit 5) once it is gone or differs",
            markup=False,
        )
    more = f" (showing the oldest {len(shown)})" if total > len(shown) else ""
    _console().print(f"{total} dead letter(s){more}; {read}")


def _stream_json(rows: Iterable[dict[str, Any]]) -> None:
    """A JSON array, as ``json.dumps(rows, indent=2)`` writes it, one element at a time."""
    first = True
    for row in rows:
        text = json.dumps(row, indent=2, sort_keys=True).replace("\n", "\n  ")
        typer.echo(("[\n  " if first else ",\n  ") + text, nl=False)
        first = False
    typer.echo("[]" if first else "\n]")


def show(
    source: Source, dead_letter_id: str, *, payload: bool, timeout: float, json_output: bool
) -> None:
    """``dlq show``: one dead letter, its hop chain and (with --payload) its record."""
    settings = source.settings()
    quiet_kafka_client()

    async def action(_: Snapshot, triage: Triage) -> DeadLetterDetail:
        letter, resolution = triage.lookup(dead_letter_id)
        return inspect_dead_letter(await triage.fetch(letter), letter, resolution)

    detail = _run(settings, _with_triage(settings, timeout, action))
    if json_output:
        _echo_json(detail.as_json(include_value=payload))
        return
    for part in detail_view(detail, payload=payload):
        _console().print(part)


@dataclass(frozen=True)
class Resolve:
    """What ``redrive`` and ``discard`` share: which dead letters, by whom, why, how."""

    dead_letter_id: str | None
    chosen: DeadLetterFilter
    who: str
    reason: str
    force: bool
    dry_run: bool

    def ids(self, snapshot: Snapshot, triage: Triage) -> list[str]:
        """The one id (checked to exist), or every unresolved dead letter the filter picks."""
        if self.dead_letter_id is not None:
            triage.lookup(self.dead_letter_id)
            return [self.dead_letter_id]
        ids = [
            letter.dead_letter_id for letter, _ in snapshot.index.select(self.chosen.predicate())
        ]
        if not ids:
            raise DeadLetterNotFound("", "no unresolved dead letter matches the filter")
        return ids


async def _each(
    ids: list[str], act: Callable[[str], Awaitable[dict[str, Any]]], *, done: str, single: bool
) -> Outcome:
    """Act on one id after the other; a single id raises, a filtered batch carries on."""
    outcome: Outcome = {done: [], "refused": [], "failed": []}
    for one in ids:
        try:
            outcome[done].append(await act(one))
        except TriageRefused as exc:
            if single:
                raise
            outcome["refused"].append({"id": one, "error": str(exc)})
        except (TriageError, KafkaError) as exc:
            if single:
                raise
            outcome["failed"].append({"id": one, "error": str(exc) or type(exc).__name__})
    return outcome


def _finish(outcome: Outcome, lines: list[tuple[str, bool]], *, json_output: bool) -> None:
    if json_output:
        _echo_json(outcome)
    else:
        for line, failed in lines:
            _console(stderr=failed).print(line, markup=False)
    if outcome.get("failed"):
        raise typer.Exit(ExitCode.FAILURE)
    if outcome.get("refused"):
        raise typer.Exit(ExitCode.REFUSED)


def _would_redrive(triage: Triage, dead_letter_id: str) -> dict[str, Any]:
    """A dry run's line: the id, and where a reference's original would be read from."""
    reference = triage.lookup(dead_letter_id)[0].reference
    where = None
    if reference is not None:
        where = f"{reference.source_topic}[{reference.source_partition}]@{reference.source_offset}"
    return {"id": dead_letter_id, "dry_run": True, "original_at": where}


def redrive(source: Source, request: Resolve, *, timeout: float, json_output: bool) -> None:
    """``dlq redrive``: republish to the source topic with a ``redriven`` hop, then resolve."""
    settings = source.settings()
    quiet_kafka_client()

    async def action(snapshot: Snapshot, triage: Triage) -> Outcome:
        ids = request.ids(snapshot, triage)
        if request.dry_run:
            return {"redriven": [_would_redrive(triage, one) for one in ids]}

        async def one(dead_letter_id: str) -> dict[str, Any]:
            done = await triage.redrive(
                dead_letter_id, who=request.who, reason=request.reason, force=request.force
            )
            return {"id": dead_letter_id, "resolution": resolution_json(done.resolution)}

        return await _each(ids, one, done="redriven", single=request.dead_letter_id is not None)

    outcome = _run(settings, _with_triage(settings, timeout, action))
    lines = redrive_lines(outcome, dry_run=request.dry_run)
    _finish(outcome, lines, json_output=json_output)


def discard(source: Source, request: Resolve, *, timeout: float, json_output: bool) -> None:
    """``dlq discard``: resolve by dropping, recording who, when and why."""
    settings = source.settings()
    quiet_kafka_client()
    texts: dict[str, str] = {}

    async def action(snapshot: Snapshot, triage: Triage) -> Outcome:
        ids = request.ids(snapshot, triage)
        if request.dry_run:
            return {"discarded": [{"id": one, "dry_run": True} for one in ids]}

        async def one(dead_letter_id: str) -> dict[str, Any]:
            resolution = await triage.discard(
                dead_letter_id, who=request.who, reason=request.reason, force=request.force
            )
            texts[dead_letter_id] = resolution_text(resolution)
            return {"id": dead_letter_id, "resolution": resolution_json(resolution)}

        return await _each(ids, one, done="discarded", single=request.dead_letter_id is not None)

    outcome = _run(settings, _with_triage(settings, timeout, action))
    discarded = outcome["discarded"]
    if json_output and request.dead_letter_id is not None and not request.dry_run:
        _echo_json(discarded[0]["resolution"])  # one id: its resolution, as before filters
        return
    lines = [
        (f"would discard {item['id']}", False)
        if request.dry_run
        else (f"discarded {item['id']}: {texts[item['id']]}", False)
        for item in discarded
    ]
    refused, failed = outcome.get("refused", []), outcome.get("failed", [])
    lines.extend((f"refused {item['id']}: {item['error']}", True) for item in refused)
    lines.extend((f"failed {item['id']}: {item['error']}", True) for item in failed)
    if request.dry_run:
        lines.append((f"would discard {len(discarded)}; nothing was changed", False))
    elif len(discarded) + len(refused) + len(failed) > 1:
        counts = f"{len(discarded)} discarded, {len(refused)} refused, {len(failed)} failed"
        lines.append((counts, False))
    _finish(outcome, lines, json_output=json_output)
