"""What ``hopchain policy show`` prints: each stage's failure policy as a table or JSON.

Imported only when the command runs (see :mod:`hopchain.cli.policy`).
"""

from __future__ import annotations

import json
from typing import Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from hopchain.cli.common import ExitCode, fail
from hopchain.config import HopchainConfig
from hopchain.exceptions import ConfigurationError
from hopchain.loading import LoadError, load_object, load_registry
from hopchain.middleware.policy import (
    Abort,
    DeadLetter,
    Degrade,
    Exit,
    Reroute,
    TransportRetry,
    default_exit,
    describe_exit,
)
from hopchain.middleware.stage import Pipeline, Stage, stages_of
from hopchain.schemas import DEAD_LETTER_SUFFIX, ContractRegistry, ErrorType

__all__ = ["describe_stage", "show_policy"]


def _side_effects(stage: Stage) -> str:
    if stage.side_effects_free:
        return "free"
    return "idempotent by key" if stage.idempotent else "has effects"


def _transport(policy: TransportRetry) -> str:
    if not policy.retries:
        return "none"
    backoff = policy.backoff
    return (
        f"{policy.retries}, backoff {backoff.initial:g}s\n"
        f"x{backoff.multiplier:g} up to {backoff.maximum:g}s\njitter {backoff.jitter:.0%}"
    )


def _exit_json(exit_: Exit) -> dict[str, Any]:
    body: dict[str, Any] = {"description": describe_exit(exit_)}
    if isinstance(exit_, DeadLetter):
        body["exit"] = "dead_letter"
    elif isinstance(exit_, Abort):
        body.update(exit="abort", scope="run" if exit_.run else "stage")
    elif isinstance(exit_, Reroute):
        body.update(exit="reroute", topic=exit_.topic)
    elif isinstance(exit_, Degrade):
        substitute = exit_.substitute
        body.update(
            exit="degrade",
            reason=exit_.reason,
            substitute=substitute.model_dump(mode="json")
            if isinstance(substitute, BaseModel)
            else {"function": getattr(substitute, "__qualname__", repr(substitute))},
        )
    return body


def _short(exit_: Exit) -> str:
    if isinstance(exit_, Reroute):
        return f"reroute to {exit_.topic}"
    if isinstance(exit_, Degrade):
        return "degrade"
    if isinstance(exit_, Abort):
        return "abort" if exit_.run else "halt stage"
    return "dead-letter"


def _other_exits(stage: Stage) -> list[tuple[ErrorType, Exit, str]]:
    """Error types whose exit is not ``on_exhausted``, and declared overrides of defaults."""
    found = []
    for error_type in ErrorType:
        exit_ = stage.exit_for(error_type)
        declared = error_type in stage.on_error
        if declared and exit_ != default_exit(error_type, stage.on_exhausted):
            found.append((error_type, exit_, "declared"))
        elif exit_ != stage.on_exhausted:
            found.append((error_type, exit_, "declared" if declared else "default"))
    return found


def _dead_letter_topic(stage: Stage, registry: ContractRegistry | None) -> tuple[str, str]:
    """The topic and where it comes from: the stage, the input's contract, or the convention."""
    if stage.dead_letter_topic:
        return stage.dead_letter_topic, "stage"
    if registry is not None and stage.input in registry:
        return registry.get(stage.input).dead_letter_topic, "contract"
    return stage.input + DEAD_LETTER_SUFFIX, "default"


def describe_stage(stage: Stage, registry: ContractRegistry | None = None) -> dict[str, Any]:
    """A stage's declared failure policy as plain JSON data."""
    transport = stage.transport_policy
    topic, source = _dead_letter_topic(stage, registry)
    return {
        "name": stage.name,
        "input": stage.input,
        "output": stage.output,
        "owner": stage.owner,
        "side_effects": _side_effects(stage).replace(" ", "_"),
        "contract_retries": stage.contract_retries,
        "rules": list(stage.rules),
        "transport": {
            "retries": transport.retries,
            "backoff": {
                "initial_seconds": transport.backoff.initial,
                "multiplier": transport.backoff.multiplier,
                "maximum_seconds": transport.backoff.maximum,
                "jitter": transport.backoff.jitter,
            },
        },
        "on_exhausted": _exit_json(stage.on_exhausted),
        "other_exits": {
            error_type.value: {**_exit_json(exit_), "source": origin}
            for error_type, exit_, origin in _other_exits(stage)
        },
        "mappers": [getattr(m, "__qualname__", repr(m)) for m in stage.mappers],
        "dead_letter_topic": topic,
        "dead_letter_topic_source": source,
    }


_HEADERS = (
    "stage",
    "input -> output",
    "owner",
    "side effects",
    "contract retries",
    "transport retries",
    "when exhausted",
    "other exits",
    "dead-letter topic",
)


def _row(stage: Stage, registry: ContractRegistry | None) -> tuple[str, ...]:
    topic, source = _dead_letter_topic(stage, registry)
    others = "\n".join(
        f"{error_type.value} -> {_short(exit_)}" + (" (declared)" if origin == "declared" else "")
        for error_type, exit_, origin in _other_exits(stage)
    )
    return (
        stage.name,
        f"{stage.input}\n-> {stage.output or '(sink)'}",
        stage.owner,
        _side_effects(stage),
        str(stage.contract_retries),
        _transport(stage.transport_policy),
        describe_exit(stage.on_exhausted),
        others or "-",
        topic if source != "default" else f"{topic}\n(default)",
    )


def _render(console: Console, title: str, rows: list[tuple[str, ...]]) -> None:
    """One row per stage when the terminal is wide enough, else one small table per stage."""
    columns = list(zip(_HEADERS, *rows, strict=True))
    # A column is never narrower than its longest word (no name is folded in the middle) and
    # never wider than its longest line; the widest columns give way first.
    floors = [max(len(word) for text in column for word in text.split()) for column in columns]
    widths = [max(len(line) for text in column for line in text.splitlines()) for column in columns]
    room = console.width - 1 - 3 * len(columns)
    if sum(floors) <= room:
        while sum(widths) > room:
            widest = max(
                (i for i, width in enumerate(widths) if width > floors[i]), key=widths.__getitem__
            )
            widths[widest] -= 1
        wide = Table(title=title, show_lines=True, title_justify="left")
        for header, width in zip(_HEADERS, widths, strict=True):
            wide.add_column(header, width=width)
        for row in rows:
            wide.add_row(*row)
        console.print(wide)
        return
    # Folding a topic name over five lines makes it unreadable; a narrow terminal gets the
    # same facts as one key/value table per stage.
    console.print(title)
    for row in rows:
        narrow = Table(show_header=False, show_lines=False, title_justify="left")
        narrow.add_column(style="bold", no_wrap=True)
        narrow.add_column(overflow="fold")
        for header, value in zip(_HEADERS[1:], row[1:], strict=True):
            narrow.add_row(header, value)
        narrow.title = f"stage {row[0]}"
        console.print(narrow)


def show_policy(target: str, contracts_spec: str | None, *, as_json: bool) -> None:
    """Load ``target`` (and the contracts) and print each stage's failure policy."""
    try:
        loaded = load_object(target)
        stages = list(stages_of(loaded))
    except LoadError as exc:
        fail(str(exc), ExitCode.USAGE)
    except ConfigurationError as exc:
        fail(f"{target}: {exc}", ExitCode.USAGE)
    try:
        contracts = load_registry(contracts_spec) if contracts_spec is not None else None
    except ConfigurationError as exc:
        fail(f"--contracts: {exc}", ExitCode.USAGE)
    name = loaded.name if isinstance(loaded, Pipeline) else None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "pipeline": name,
                    "stages": [describe_stage(s, contracts) for s in stages],
                    "plain_handlers": _plain_handlers(),
                },
                sort_keys=True,
            )
        )
        return
    title = f"pipeline {name}: failure policy" if name else f"{target}: failure policy"
    # Made per call: the width follows the terminal (or $COLUMNS) the command runs in.
    console = Console(highlight=False)
    _render(console, title, [_row(stage, contracts) for stage in stages])
    console.print(
        "Error types not listed under 'other exits' take the 'when exhausted' exit. Transport "
        "retries apply to transient failures; contract retries re-run the stage with the "
        "validation errors (contract_violation, conflict). A (default) dead-letter topic is "
        "the input contract's, unless that contract names another: pass --contracts to check."
    )
    console.print(_plain_handlers())


def _plain_handlers() -> str:
    """What a handler without a declared stage does, with the configured default budget."""
    try:
        config = HopchainConfig()
    except ConfigurationError as exc:
        return f"Handlers without a declared stage: unknown ({exc})."
    return (
        "Handlers without a declared stage: transient -> retried in place "
        f"{config.transport_retries} time(s), backoff {config.transport_backoff_seconds:g}s "
        "doubling (HOPCHAIN_TRANSPORT_RETRIES), then dead-letter; unauthorized -> halt stage; "
        "environment -> abort; every other type -> dead-letter."
    )
