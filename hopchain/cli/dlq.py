"""``hopchain dlq``: run the dead-letter consumer, and triage dead letters from the shell.

``serve`` runs the service (metrics, health, triage over HTTP). ``list``, ``show``,
``redrive`` and ``discard`` need no service: they rebuild the index straight from Kafka
(the dead-letter topics and the resolutions topic, read up to their current end) and act
on it. Exit codes: 0 done, 1 failed, 2 usage, 4 not found, 5 refused (already resolved,
redrive limit reached: ``--force`` overrides; a reference dead letter whose original is
gone or differs: nothing overrides).

Each flag means one thing in every command: ``--dlq-topic NAME[=OWNER]`` is a dead-letter
topic to read (with the owner paged for it), ``--owner`` and ``--source-topic`` choose dead
letters. This module declares the commands; :mod:`hopchain.cli.dlq_actions` does the work
and is imported only when a command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, get_args

import typer

from hopchain.cli.common import BootstrapOption, ContractsOption, ExitCode, fail, group
from hopchain.cli.dlq_options import (
    ERROR_TYPES,
    DlqTopicOption,
    ErrorTypeFilter,
    ErrorTypeName,
    ForceOption,
    IdArgument,
    IndexOption,
    JsonOption,
    MinAgeFilter,
    OwnerFilter,
    PatternOption,
    ReasonOption,
    ResolutionsOption,
    SourceTopicFilter,
    TimeoutOption,
    WhoOption,
)

if TYPE_CHECKING:
    from hopchain.cli.dlq_resolve import Resolve

__all__ = ["ERROR_TYPES", "ErrorTypeName", "app"]

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

app = group(
    "The dead-letter consumer: serve metrics, list, show, redrive and discard dead letters."
)


def _id(dead_letter_id: str | None) -> str | None:
    if dead_letter_id is not None and not dead_letter_id.strip():
        fail("ID is empty: give a dead-letter id (see `hopchain dlq list`)", ExitCode.USAGE)
    return dead_letter_id


# -- serve ---------------------------------------------------------------------------------


@app.command("serve")
def serve(
    *,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    dlq_topic: DlqTopicOption = None,
    pattern: PatternOption = None,
    resolutions_topic: ResolutionsOption = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            envvar="HOPCHAIN_DLQ_HOST",
            metavar="ADDRESS",
            help="Address to serve HTTP on. Default: 127.0.0.1.",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            envvar="HOPCHAIN_DLQ_PORT",
            metavar="PORT",
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
        LogLevel,
        typer.Option(
            "--log-level",
            envvar="HOPCHAIN_LOG_LEVEL",
            metavar="LEVEL",
            case_sensitive=False,
            help=f"Logging level: {', '.join(get_args(LogLevel))}.",
        ),
    ] = "INFO",
) -> None:
    """Consume every dead-letter topic; serve /metrics, /healthz, /readyz, triage and /ui.

    The console at /ui shows depth and age per owner, lists and filters dead letters, shows
    one with its hop chain and payload, and redrives or discards (HOPCHAIN_DLQ_TRACE_URL,
    with {trace_id} in it, links each dead letter's trace).

    The bearer token of the mutating endpoints is read from HOPCHAIN_DLQ_TOKEN only (never
    from the command line, where other users could read it); without it they are disabled.
    """
    import logging  # noqa: PLC0415 - only the service logs

    from hopchain.cli import dlq_actions  # noqa: PLC0415 - loads aiokafka and the service

    source = dlq_actions.Source(
        bootstrap, contracts, pattern, tuple(dlq_topic or ()), resolutions_topic
    )
    settings = source.settings(
        dlq_host=("--host", host),
        dlq_port=("--port", port),
        dlq_create_topics=("--create-topics", create_topics),
    )
    from hopchain.logs import LogSettings  # noqa: PLC0415 - only the service logs

    handler = logging.StreamHandler()
    if LogSettings().line_format == "json":  # HOPCHAIN_LOG_FORMAT, as for the middleware
        handler.setFormatter(LogSettings().formatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    raise typer.Exit(dlq_actions.serve(settings))


# -- list and show -------------------------------------------------------------------------


@app.command("list")
def list_(
    *,
    owner: OwnerFilter = None,
    source_topic: SourceTopicFilter = None,
    error_type: ErrorTypeFilter = None,
    min_age: MinAgeFilter = None,
    include_resolved: Annotated[
        bool, typer.Option("--all", help="Include resolved dead letters.")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            metavar="N",
            help="Show at most this many, oldest first. Default: 200 in the table, "
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
    index: IndexOption = None,
) -> None:
    """List unresolved dead letters, oldest first (read straight from Kafka, or --index)."""
    from hopchain.cli import dlq_actions  # noqa: PLC0415 - loads aiokafka

    chosen = dlq_actions.choose(owner, source_topic, error_type, min_age)
    source = dlq_actions.Source(
        bootstrap, contracts, pattern, tuple(dlq_topic or ()), resolutions_topic
    )
    dlq_actions.list_letters(
        source,
        chosen,
        include_resolved=include_resolved,
        limit=limit,
        timeout=timeout,
        json_output=json_output,
        index_path=index,
    )


@app.command("show")
def show(
    dead_letter_id: IdArgument,
    *,
    payload: Annotated[
        bool,
        typer.Option(
            "--payload",
            help="Also print the record's value; one framed for a schema registry is "
            "decoded with its schema (HOPCHAIN_SCHEMA_REGISTRY_URL), beside its schema id "
            "and subject.",
        ),
    ] = False,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
    index_path: IndexOption = None,
) -> None:
    """Show one dead letter: why it failed, its whole hop chain as a timeline, its record."""
    _id(dead_letter_id)
    from hopchain.cli import dlq_actions  # noqa: PLC0415 - loads aiokafka

    source = dlq_actions.Source(
        bootstrap, contracts, pattern, tuple(dlq_topic or ()), resolutions_topic
    )
    dlq_actions.show(
        source,
        dead_letter_id,
        payload=payload,
        timeout=timeout,
        json_output=json_output,
        index_path=index_path,
    )


# -- redrive and discard -------------------------------------------------------------------

DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Only say what would be done, with how many by error type and reason (and, for "
        "redrive, how many the redrive limit would refuse); change nothing.",
    ),
]


def _resolve_request(
    verb: str,
    dead_letter_id: str | None,
    filters: tuple[str | None, str | None, str | None, str | None],
    *,
    who: str | None,
    reason: str,
    force: bool,
    dry_run: bool,
    index_path: str | None,
) -> Resolve:
    from hopchain.cli import dlq_actions, dlq_resolve  # noqa: PLC0415 - loads aiokafka

    chosen = dlq_actions.choose(*filters)
    if _id(dead_letter_id) is None and chosen.is_empty:
        fail(
            f"name a dead-letter ID, or choose by --owner, --source-topic, --error-type or "
            f"--min-age; refusing to {verb} every dead letter at once",
            ExitCode.USAGE,
        )
    if dead_letter_id is not None and not chosen.is_empty:
        fail("give an ID or filters (--owner, ...), not both", ExitCode.USAGE)
    return dlq_resolve.Resolve(
        dead_letter_id,
        chosen,
        who=dlq_actions.who_is(who),
        reason=reason,
        force=force,
        dry_run=dry_run,
        index_path=index_path,
    )


@app.command("redrive")
def redrive(
    dead_letter_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="The dead letter; or choose several by filter."),
    ] = None,
    *,
    reason: ReasonOption,
    who: WhoOption = None,
    force: ForceOption = False,
    dry_run: DryRunOption = False,
    owner: OwnerFilter = None,
    source_topic: SourceTopicFilter = None,
    error_type: ErrorTypeFilter = None,
    min_age: MinAgeFilter = None,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
    index_path: IndexOption = None,
) -> None:
    """Republish dead letters to their source topic with a `redriven` hop, then resolve them.

    The original key and payload go back unchanged, with the envelope extended by one hop
    naming who redrove it (records rejected without a readable envelope go back byte for
    byte). The intent key is unchanged. A dead letter already resolved, or redriven
    HOPCHAIN_DLQ_REDRIVE_LIMIT times (default 3, counted from the redriven hops of its chain
    or its hopchain-redrive-count header), is refused with exit status 5 unless --force is
    given. Filters redrive every unresolved dead letter they match.

    A reference dead letter (a record too large to park; `dlq list` marks it) holds no
    value: its original is read again from its source topic, partition and offset, and sent
    only if its size and SHA-256 match the reference. Once the source topic no longer holds
    it, or holds other bytes there, the redrive is refused with exit status 5 and nothing is
    sent, even with --force.
    """
    from hopchain.cli import dlq_actions, dlq_resolve  # noqa: PLC0415 - loads aiokafka

    request = _resolve_request(
        "redrive",
        dead_letter_id,
        (owner, source_topic, error_type, min_age),
        who=who,
        reason=reason,
        force=force,
        dry_run=dry_run,
        index_path=index_path,
    )
    source = dlq_actions.Source(
        bootstrap, contracts, pattern, tuple(dlq_topic or ()), resolutions_topic
    )
    dlq_resolve.redrive(source, request, timeout=timeout, json_output=json_output)


@app.command("discard")
def discard(
    dead_letter_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="The dead letter; or choose several by filter."),
    ] = None,
    *,
    reason: ReasonOption,
    who: WhoOption = None,
    force: ForceOption = False,
    dry_run: DryRunOption = False,
    owner: OwnerFilter = None,
    source_topic: SourceTopicFilter = None,
    error_type: ErrorTypeFilter = None,
    min_age: MinAgeFilter = None,
    bootstrap: BootstrapOption = None,
    contracts: ContractsOption = None,
    pattern: PatternOption = None,
    dlq_topic: DlqTopicOption = None,
    resolutions_topic: ResolutionsOption = None,
    timeout: TimeoutOption = 120.0,
    json_output: JsonOption = False,
    index_path: IndexOption = None,
) -> None:
    """Resolve dead letters by dropping them, recording who, when and why.

    The records stay in their dead-letter topic (retention is unlimited); they only stop
    counting towards depth and age. A dead letter already resolved is refused (exit 5)
    unless --force is given. Filters discard every unresolved dead letter they match.
    """
    from hopchain.cli import dlq_actions, dlq_resolve  # noqa: PLC0415 - loads aiokafka

    request = _resolve_request(
        "discard",
        dead_letter_id,
        (owner, source_topic, error_type, min_age),
        who=who,
        reason=reason,
        force=force,
        dry_run=dry_run,
        index_path=index_path,
    )
    source = dlq_actions.Source(
        bootstrap, contracts, pattern, tuple(dlq_topic or ()), resolutions_topic
    )
    dlq_resolve.discard(source, request, timeout=timeout, json_output=json_output)
