"""``hopchain dlq``: run the dead-letter consumer, and triage dead letters from the shell.

``serve`` runs the service (metrics, health, triage over HTTP). ``list``, ``show``,
``redrive`` and ``discard`` need no service: they rebuild the index straight from Kafka
(the dead-letter topics and the resolutions topic, read up to their current end) and act
on it. Exit codes: 0 done, 1 failed, 2 usage, 4 not found, 5 refused (already resolved,
redrive limit reached: ``--force`` overrides).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from aiokafka.errors import KafkaError
from pydantic import ValidationError
from rich.console import Console

from hopchain.cli.common import ContractsOption, ExitCode, fail
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.detail import DeadLetterDetail, inspect_dead_letter
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.filters import DeadLetterFilter, parse_duration
from hopchain.consumers.reader import Snapshot, load_index
from hopchain.consumers.render import (
    detail_view,
    list_table,
    redrive_lines,
    resolution_json,
    resolution_text,
)
from hopchain.consumers.resolutions import Resolution
from hopchain.consumers.service import serve as serve_forever
from hopchain.consumers.triage import Triage
from hopchain.exceptions import ConfigurationError
from hopchain.schemas.vocabulary import ErrorType

__all__ = ["app"]

T = TypeVar("T")

TABLE_LIMIT = 200
"""Rows ``hopchain dlq list`` prints for people unless --limit says otherwise."""

app = typer.Typer(
    help="The dead-letter consumer: serve metrics, list, show, redrive and discard dead letters.",
    no_args_is_help=True,
)
_console = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


# -- options -------------------------------------------------------------------------------

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        envvar="HOPCHAIN_KAFKA_BOOTSTRAP",
        help="Kafka bootstrap servers. Default: 127.0.0.1:9092.",
        show_default=False,
    ),
]
PatternOption = Annotated[
    str | None,
    typer.Option(
        "--pattern",
        envvar="HOPCHAIN_DLQ_TOPIC_PATTERN",
        help="Read every topic whose whole name matches this regular expression. Default, "
        "when no --contracts or topic is given: '.*\\.dlq'.",
        show_default=False,
    ),
]
DlqTopicOption = Annotated[
    list[str] | None,
    typer.Option(
        "--dlq-topic",
        help="A dead-letter topic to read, as NAME or NAME=OWNER (repeatable).",
        show_default=False,
    ),
]
ResolutionsOption = Annotated[
    str | None,
    typer.Option(
        "--resolutions-topic",
        envvar="HOPCHAIN_DLQ_RESOLUTIONS_TOPIC",
        help="The compacted resolutions topic. Default: hopchain.dlq.resolutions.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
WhoOption = Annotated[
    str | None,
    typer.Option("--who", help="Who is resolving (recorded). Default: $USER.", show_default=False),
]
ReasonOption = Annotated[
    str, typer.Option("--reason", help="Why (recorded with the resolution, for people).")
]
ForceOption = Annotated[
    bool,
    typer.Option("--force", help="Do it even if already resolved or over the redrive limit."),
]
OwnerFilter = Annotated[
    str | None, typer.Option("--owner", help="Only dead letters of this owner.", show_default=False)
]
TopicFilter = Annotated[
    str | None,
    typer.Option("--topic", help="Only dead letters from this source topic.", show_default=False),
]
ErrorTypeFilter = Annotated[
    ErrorType | None,
    typer.Option("--error-type", help="Only dead letters of this error type.", show_default=False),
]
MinAgeFilter = Annotated[
    str | None,
    typer.Option(
        "--min-age",
        help="Only dead letters parked at least this long ago (90s, 15m, 2h, 1d).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option("--timeout", help="Seconds allowed to read the topics to their end.", min=1.0),
]


def _settings(**overrides: Any) -> DlqSettings:
    try:
        return DlqSettings(
            **{name: value for name, value in overrides.items() if value is not None}
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        fail(f"{'.'.join(map(str, first['loc']))}: {first['msg']}", ExitCode.USAGE)


def _topic_pairs(specs: list[str] | None) -> dict[str, str] | None:
    if not specs:
        return None
    topics: dict[str, str] = {}
    for spec in specs:
        name, _, owner = spec.partition("=")
        topics[name.strip()] = owner.strip() or "unknown"
    return topics


def _source(
    bootstrap: str | None,
    contracts: str | None,
    pattern: str | None,
    dlq_topics: list[str] | None,
    resolutions_topic: str | None,
) -> DlqSettings:
    return _settings(
        kafka_bootstrap=bootstrap,
        contracts=contracts,
        dlq_topic_pattern=pattern,
        dlq_topics=_topic_pairs(dlq_topics),
        dlq_resolutions_topic=resolutions_topic,
    )


def _who(who: str | None) -> str:
    name = who or os.environ.get("USER")
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            fail("cannot tell who you are; pass --who NAME", ExitCode.USAGE)
    return name


def _filter(
    owner: str | None, topic: str | None, error_type: ErrorType | None, min_age: str | None
) -> DeadLetterFilter:
    try:
        seconds = parse_duration(min_age) if min_age is not None else None
    except ValueError as exc:
        fail(f"--min-age: {exc}", ExitCode.USAGE)
    return DeadLetterFilter(
        owner=owner,
        source_topic=topic,
        error_type=error_type.value if error_type is not None else None,
        min_age_seconds=seconds,
    )


def _run(coroutine: Awaitable[T]) -> T:
    """Run a coroutine, turning known errors into messages and exit statuses."""

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
        detail = str(exc) or "no answer in time"
        fail(f"Kafka: {type(exc).__name__}: {detail}; is the broker reachable?", ExitCode.FAILURE)


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


# -- serve ---------------------------------------------------------------------------------


@app.command("serve")
def serve(
    *,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            help="A dead-letter topic to read (repeatable); pair each with --owner.",
            show_default=False,
        ),
    ] = None,
    owner: Annotated[
        list[str] | None,
        typer.Option(
            "--owner",
            help="The owner paged for the --topic at the same position (or one owner for all).",
            show_default=False,
        ),
    ] = None,
    pattern: PatternOption = None,
    resolutions_topic: ResolutionsOption = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            envvar="HOPCHAIN_DLQ_HOST",
            help="Address to serve HTTP on. Default: 127.0.0.1.",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            envvar="HOPCHAIN_DLQ_PORT",
            help="Port to serve HTTP on; 0 picks a free one. Default: 9478.",
            min=0,
            max=65535,
            show_default=False,
        ),
    ] = None,
    create_topics: Annotated[
        bool | None,
        typer.Option(
            "--create-topics/--no-create-topics",
            envvar="HOPCHAIN_DLQ_CREATE_TOPICS",
            help="Create missing dead-letter topics (unlimited retention) and the compacted "
            "resolutions topic. Default: on.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option("--log-level", envvar="HOPCHAIN_LOG_LEVEL", help="Logging level.")
    ] = "INFO",
) -> None:
    """Consume every dead-letter topic; serve /metrics, /healthz, /readyz, triage and /ui.

    The console at /ui shows depth and age per owner, lists and filters dead letters, shows
    one with its hop chain and payload, and redrives or discards (HOPCHAIN_DLQ_TRACE_URL,
    with {trace_id} in it, links each dead letter's trace).

    The bearer token of the mutating endpoints is read from HOPCHAIN_DLQ_TOKEN only (never
    from the command line, where other users could read it); without it they are disabled.
    """
    topics = list(topic or [])
    owners = list(owner or [])
    if owners and not topics:
        fail("--owner names the owner of a --topic; give the --topic too", ExitCode.USAGE)
    if topics and len(owners) not in {1, len(topics)}:
        fail(
            f"{len(topics)} --topic but {len(owners)} --owner: give one --owner per --topic, "
            "or one for all",
            ExitCode.USAGE,
        )
    pairs = dict(zip(topics, owners * len(topics) if len(owners) == 1 else owners, strict=False))
    for name in topics:
        pairs.setdefault(name, "unknown")
    settings = _settings(
        kafka_bootstrap=bootstrap,
        contracts=contracts,
        dlq_topic_pattern=pattern,
        dlq_topics=pairs or None,
        dlq_resolutions_topic=resolutions_topic,
        dlq_host=host,
        dlq_port=port,
        dlq_create_topics=create_topics,
    )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    raise typer.Exit(_run(serve_forever(settings)))


# -- list ----------------------------------------------------------------------------------


@app.command("list")
def list_(
    *,
    owner: OwnerFilter = None,
    topic: TopicFilter = None,
    error_type: ErrorTypeFilter = None,
    min_age: MinAgeFilter = None,
    include_resolved: Annotated[
        bool, typer.Option("--all", help="Include resolved dead letters.")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            help=f"Show at most this many, oldest first. Default: {TABLE_LIMIT} in the table, "
            "all with --json.",
            min=1,
            show_default=False,
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
) -> None:
    """List unresolved dead letters, oldest first (read straight from Kafka)."""
    settings = _source(bootstrap, contracts, pattern, dlq_topic, resolutions_topic)
    chosen = _filter(owner, topic, error_type, min_age)
    snapshot = _run(load_index(settings, timeout=timeout))
    now = time.time()
    letters = snapshot.index.select(chosen.predicate(now), include_resolved=include_resolved)
    total = len(letters)
    if limit is not None or not json_output:
        letters = letters[: limit or TABLE_LIMIT]
    if json_output:
        _echo_json(
            [
                {**letter.as_json(), "resolution": resolution_json(resolution)}
                for letter, resolution in letters
            ]
        )
        return
    _console.print(list_table(letters, now, include_resolved=include_resolved))
    shown = f" (showing the oldest {len(letters)})" if total > len(letters) else ""
    _console.print(
        f"{total} dead letter(s){shown}; {snapshot.records_read} records read from "
        f"{len(snapshot.topics)} dead-letter topic(s) in {snapshot.seconds:.1f} s"
    )


# -- show ----------------------------------------------------------------------------------


@app.command("show")
def show(
    dead_letter_id: Annotated[str, typer.Argument(metavar="ID", help="The dead-letter id.")],
    *,
    payload: Annotated[
        bool, typer.Option("--payload", help="Also print the record's value.")
    ] = False,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
) -> None:
    """Show one dead letter: why it failed, its whole hop chain as a timeline, its record."""
    settings = _source(bootstrap, contracts, pattern, dlq_topic, resolutions_topic)

    async def action(_: Snapshot, triage: Triage) -> DeadLetterDetail:
        letter, resolution = triage.lookup(dead_letter_id)
        return inspect_dead_letter(await triage.fetch(letter), letter, resolution)

    detail = _run(_with_triage(settings, timeout, action))
    if json_output:
        _echo_json(detail.as_json(include_value=payload))
        return
    for part in detail_view(detail, payload=payload):
        _console.print(part)


# -- redrive and discard -------------------------------------------------------------------


def _redriven_json(dead_letter_id: str, resolution: Resolution) -> dict[str, Any]:
    return {"id": dead_letter_id, "resolution": resolution_json(resolution)}


async def _redrive_each(
    triage: Triage, ids: list[str], *, who: str, reason: str, force: bool, single: bool
) -> dict[str, list[dict[str, Any]]]:
    """Redrive one after the other; a single id raises, a filtered batch carries on."""
    outcome: dict[str, list[dict[str, Any]]] = {"redriven": [], "refused": [], "failed": []}
    for one in ids:
        try:
            done = await triage.redrive(one, who=who, reason=reason, force=force)
        except TriageRefused as exc:
            if single:
                raise
            outcome["refused"].append({"id": one, "error": str(exc)})
        except (TriageError, KafkaError) as exc:
            if single:
                raise
            outcome["failed"].append({"id": one, "error": f"{type(exc).__name__}: {exc}"})
        else:
            outcome["redriven"].append(_redriven_json(one, done.resolution))
    return outcome


def _report_redrive(
    outcome: dict[str, list[dict[str, Any]]], *, dry_run: bool, json_output: bool
) -> None:
    if json_output:
        _echo_json(outcome)
    else:
        for line, failed in redrive_lines(outcome, dry_run=dry_run):
            (_err if failed else _console).print(line, markup=False)
    if outcome.get("failed"):
        raise typer.Exit(ExitCode.FAILURE)
    if outcome.get("refused"):
        raise typer.Exit(ExitCode.REFUSED)


@app.command("redrive")
def redrive(
    dead_letter_id: Annotated[
        str | None,
        typer.Argument(metavar="[ID]", help="The dead letter; or choose several by filter."),
    ] = None,
    *,
    reason: ReasonOption,
    who: WhoOption = None,
    force: ForceOption = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be redriven.")
    ] = False,
    owner: OwnerFilter = None,
    topic: TopicFilter = None,
    error_type: ErrorTypeFilter = None,
    min_age: MinAgeFilter = None,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
) -> None:
    """Republish dead letters to their source topic with a `redriven` hop, then resolve them.

    The original key and payload go back unchanged, with the envelope extended by one hop
    naming who redrove it (records rejected without a readable envelope go back byte for
    byte). The intent key is unchanged. A dead letter already resolved, or redriven
    HOPCHAIN_DLQ_REDRIVE_LIMIT times (default 3), is refused with exit status 5 unless
    --force is given. Filters redrive every unresolved dead letter they match.
    """
    chosen = _filter(owner, topic, error_type, min_age)
    if dead_letter_id is None and chosen.is_empty:
        fail(
            "name a dead-letter ID, or choose by --owner, --topic, --error-type or --min-age; "
            "refusing to redrive every dead letter at once",
            ExitCode.USAGE,
        )
    if dead_letter_id is not None and not chosen.is_empty:
        fail("give an ID or filters, not both", ExitCode.USAGE)
    settings = _source(bootstrap, contracts, pattern, dlq_topic, resolutions_topic)
    person = _who(who)

    async def action(snapshot: Snapshot, triage: Triage) -> dict[str, list[dict[str, Any]]]:
        if dead_letter_id is not None:
            triage.lookup(dead_letter_id)
            ids = [dead_letter_id]
        else:
            ids = [letter.dead_letter_id for letter, _ in snapshot.index.select(chosen.predicate())]
            if not ids:
                raise DeadLetterNotFound("", "no unresolved dead letter matches the filter")
        if dry_run:
            return {"redriven": [{"id": one, "dry_run": True} for one in ids]}
        return await _redrive_each(
            triage, ids, who=person, reason=reason, force=force, single=dead_letter_id is not None
        )

    outcome = _run(_with_triage(settings, timeout, action))
    _report_redrive(outcome, dry_run=dry_run, json_output=json_output)


@app.command("discard")
def discard(
    dead_letter_id: Annotated[str, typer.Argument(metavar="ID", help="The dead-letter id.")],
    *,
    reason: ReasonOption,
    who: WhoOption = None,
    force: ForceOption = False,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
) -> None:
    """Resolve a dead letter by dropping it, recording who, when and why.

    The record stays in its dead-letter topic (retention is unlimited); it only stops
    counting towards depth and age. A dead letter already resolved is refused (exit 5)
    unless --force is given.
    """
    settings = _source(bootstrap, contracts, pattern, dlq_topic, resolutions_topic)
    person = _who(who)

    async def action(_: Snapshot, triage: Triage) -> Resolution:
        return await triage.discard(dead_letter_id, who=person, reason=reason, force=force)

    resolution = _run(_with_triage(settings, timeout, action))
    if json_output:
        _echo_json(resolution_json(resolution))
    else:
        _console.print(f"discarded {dead_letter_id}: {resolution_text(resolution)}")
