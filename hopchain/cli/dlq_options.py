"""The options of the ``hopchain dlq`` commands: each flag means one thing in every command."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import typer

__all__ = [
    "ERROR_TYPES",
    "DlqTopicOption",
    "ErrorTypeFilter",
    "ErrorTypeName",
    "ForceOption",
    "IdArgument",
    "IndexOption",
    "JsonOption",
    "MinAgeFilter",
    "OwnerFilter",
    "PatternOption",
    "ReasonOption",
    "ResolutionsOption",
    "SourceTopicFilter",
    "TimeoutOption",
    "WhoOption",
]

ErrorTypeName = Literal[
    "malformed",
    "contract_violation",
    "transient",
    "conflict",
    "rejected_input",
    "unauthorized",
    "environment",
    "internal",
]
"""The values of :class:`hopchain.schemas.ErrorType`, spelled out so ``--help`` loads no
pydantic (a test keeps the two equal)."""

ERROR_TYPES: tuple[str, ...] = get_args(ErrorTypeName)

PatternOption = Annotated[
    str | None,
    typer.Option(
        "--pattern",
        envvar="HOPCHAIN_DLQ_TOPIC_PATTERN",
        metavar="REGEX",
        help="Read every topic whose whole name matches this regular expression. Default, "
        "when no --contracts or --dlq-topic is given: '.*\\.dlq'.",
        show_default=False,
    ),
]
DlqTopicOption = Annotated[
    list[str] | None,
    typer.Option(
        "--dlq-topic",
        metavar="NAME[=OWNER]",
        help="A dead-letter topic to read, with the owner paged for it (repeatable). "
        "Default owner: unknown.",
        show_default=False,
    ),
]
ResolutionsOption = Annotated[
    str | None,
    typer.Option(
        "--resolutions-topic",
        envvar="HOPCHAIN_DLQ_RESOLUTIONS_TOPIC",
        metavar="TOPIC",
        help="The compacted resolutions topic. Default: hopchain.dlq.resolutions.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
WhoOption = Annotated[
    str | None,
    typer.Option(
        "--who",
        metavar="NAME",
        help="Who is resolving (recorded). Default: $USER.",
        show_default=False,
    ),
]
ReasonOption = Annotated[
    str,
    typer.Option(
        "--reason", metavar="TEXT", help="Why (recorded with the resolution, for people)."
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option("--force", help="Do it even if already resolved or over the redrive limit."),
]
OwnerFilter = Annotated[
    str | None,
    typer.Option(
        "--owner", metavar="OWNER", help="Only dead letters of this owner.", show_default=False
    ),
]
SourceTopicFilter = Annotated[
    str | None,
    typer.Option(
        "--source-topic",
        metavar="TOPIC",
        help="Only dead letters that failed on this topic.",
        show_default=False,
    ),
]
ErrorTypeFilter = Annotated[
    ErrorTypeName | None,
    typer.Option(
        "--error-type",
        metavar="TYPE",
        help=f"Only dead letters of this error type: {', '.join(ERROR_TYPES)}.",
        show_default=False,
    ),
]
MinAgeFilter = Annotated[
    str | None,
    typer.Option(
        "--min-age",
        metavar="AGE",
        help="Only dead letters parked at least this long ago (90s, 15m, 2h, 1d).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Seconds allowed to read the topics to their end.",
        min=1.0,
    ),
]
IdArgument = Annotated[str, typer.Argument(metavar="ID", help="The dead-letter id.")]
IndexOption = Annotated[
    str | None,
    typer.Option(
        "--index",
        metavar="FILE",
        help="Read the dead-letter service's index file (its HOPCHAIN_DLQ_INDEX_PATH) instead "
        "of the topics: as fast at any depth, as fresh as the service's last batch.",
        show_default=False,
    ),
]
