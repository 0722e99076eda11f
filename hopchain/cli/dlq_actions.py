"""What the ``hopchain dlq`` commands do once their flags are read.

Imported only when a ``dlq`` command runs (see :mod:`hopchain.cli.dlq`), so that ``hopchain
--help`` loads neither aiokafka nor the dead-letter stack. Every known failure ends the
command with one line on stderr and its exit status: 1 failed (Kafka unreachable), 2 an
invalid flag or variable, 4 not found, 5 refused (including a reference dead letter whose
original the source topic no longer holds, or holds with other bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import itertools
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer
from aiokafka.errors import KafkaError
from rich.console import Console

from hopchain.cli.common import (
    ExitCode,
    fail,
    kafka_failure,
    load_config,
    quiet_kafka_client,
)
from hopchain.cli.output import console
from hopchain.collector import tune_collector
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.detail import DeadLetterDetail, inspect_dead_letter, with_payload
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.filters import DeadLetterFilter, parse_duration
from hopchain.consumers.index import Pair
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.reader import Snapshot, load_index
from hopchain.consumers.render import (
    detail_view,
    list_table,
    resolution_json,
)
from hopchain.consumers.store import LetterStore
from hopchain.consumers.triage import Triage
from hopchain.exceptions import ConfigurationError

__all__ = [
    "Outcome",
    "Source",
    "choose",
    "echo_json",
    "list_letters",
    "opened_index",
    "run",
    "serve",
    "show",
    "stream_json",
    "terminal",
    "who_is",
    "with_triage",
]

T = TypeVar("T")

TABLE_LIMIT = 200
"""Rows ``hopchain dlq list`` prints for people unless --limit says otherwise."""

Outcome = dict[str, list[dict[str, Any]]]


@functools.cache
def terminal(*, stderr: bool = False) -> Console:
    """The console of the commands' output (stderr's, for refusals and failures)."""
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


def run(settings: DlqSettings, coroutine: Awaitable[T]) -> T:
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


def rebuild_into(
    store: LetterStore, settings: DlqSettings, timeout: float
) -> Coroutine[Any, Any, Snapshot]:
    """Open ``store`` and read the topics into it (the collector set for indexing)."""
    tune_collector()
    store.open()
    return load_index(settings, timeout=timeout, index=store)


@contextlib.asynccontextmanager
async def opened_index(
    settings: DlqSettings,
    timeout: float,  # noqa: ASYNC109 - bounds the rebuild
    index_path: str | None,
) -> AsyncIterator[Snapshot]:
    """The service's index file, read only; else the topics read into a temporary file.

    Either way memory stays bounded whatever the depth.
    """
    with tempfile.TemporaryDirectory(prefix="hopchain-dlq-") as folder:
        store = LetterStore(index_path or Path(folder) / "index.sqlite")
        try:
            if index_path is not None:
                await asyncio.to_thread(store.open_read_only)
                yield Snapshot(store, DlqMetrics(store), {}, 0, 0.0)
            else:
                yield await rebuild_into(store, settings, timeout)
        finally:
            store.close()


async def with_triage(
    settings: DlqSettings,
    timeout: float,  # noqa: ASYNC109 - bounds the rebuild
    action: Callable[[Snapshot, Triage], Awaitable[T]],
    index_path: str | None = None,
) -> T:
    """Run ``action`` with the index (see :func:`opened_index`) and a started triage."""
    async with opened_index(settings, timeout, index_path) as snapshot:
        # A service's index file is the service's to write: it reads each resolution back
        # from the resolutions topic, as it reads those of every other triage.
        keep = None if index_path is None else _written_by_the_service
        triage = Triage(settings, snapshot.index, on_resolution=keep)
        await triage.start()
        try:
            return await action(snapshot, triage)
        finally:
            await triage.stop()


def _written_by_the_service(_: object) -> None:
    return None


def echo_json(body: Any) -> None:
    """Print one JSON document, indented, keys sorted."""
    typer.echo(json.dumps(body, indent=2, sort_keys=True))


def serve(settings: DlqSettings) -> int:
    """Run the dead-letter service until it is stopped; its exit status."""
    from hopchain.consumers.service import serve as serve_forever  # noqa: PLC0415 - dlq extra

    tune_collector()
    return run(settings, serve_forever(settings))


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
                run(settings, asyncio.to_thread(store.open_read_only))
                read = f"read from the index file {index_path}"
            else:
                snapshot = run(settings, rebuild_into(store, settings, timeout))
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
        stream_json(
            {**letter.as_json(), "resolution": resolution_json(resolution)}
            for letter, resolution in letters
        )
        return
    shown = list(letters)
    total = index.count(chosen, now=now, resolved=resolved)
    terminal().print(list_table(shown, now, include_resolved=include_resolved))
    references = sum(letter.reference is not None for letter, _ in shown)
    if references:
        terminal().print(
            f"{references} of these are references (REASON ends in '(reference)'): the record "
            "was too large to park, so the dead letter holds no value. `hopchain dlq show ID` "
            "says where the original is; redrive re-reads it from there while the source "
            "topic retains it, and refuses (exit 5) once it is gone or differs",
            markup=False,
        )
    more = f" (showing the oldest {len(shown)})" if total > len(shown) else ""
    terminal().print(f"{total} dead letter(s){more}; {read}")


def stream_json(
    rows: Iterable[dict[str, Any]],
    key: str | None = None,
    then: tuple[str, Callable[[], Any]] | None = None,
) -> None:
    """A JSON array (under ``key`` in an object), written one element at a time.

    ``then`` is one more member of that object, ``(name, value)``, its value asked for once
    the array is written (a name that sorts after ``key``).
    Byte for byte what ``json.dumps(..., indent=2, sort_keys=True)`` writes for the whole.
    """
    indent = "  " if key is None else "    "
    opening, closing = ("", "") if key is None else (f'{{\n  "{key}": ', "\n}")
    first = True
    for row in rows:
        text = json.dumps(row, indent=2, sort_keys=True).replace("\n", "\n" + indent)
        start = f"{opening}[\n{indent}" if first else f",\n{indent}"
        typer.echo(start + text, nl=False)
        first = False
    if key is not None and then is not None:
        name, value = then
        text = json.dumps(value(), indent=2, sort_keys=True).replace("\n", "\n  ")
        closing = f',\n  "{name}": {text}' + closing
    typer.echo((f"{opening}[]" if first else f"\n{indent[2:]}]") + closing)


def show(
    source: Source,
    dead_letter_id: str,
    *,
    payload: bool,
    timeout: float,
    json_output: bool,
    index_path: str | None = None,
) -> None:
    """``dlq show``: one dead letter, its hop chain and (with --payload) its record."""
    settings = source.settings()
    quiet_kafka_client()

    async def action(_: Snapshot, triage: Triage) -> DeadLetterDetail:
        letter, resolution = triage.lookup(dead_letter_id)
        detail = inspect_dead_letter(await triage.fetch(letter), letter, resolution)
        if not payload:
            return detail
        # A framed value is decoded with its schema from the registry (a blocking lookup).
        return await asyncio.to_thread(with_payload, detail, settings.schema_registry_url)

    detail = run(settings, with_triage(settings, timeout, action, index_path))
    if json_output:
        echo_json(detail.as_json(include_value=payload))
        return
    for part in detail_view(detail, payload=payload):
        terminal().print(part)
