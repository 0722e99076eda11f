"""What ``hopchain dlq redrive`` and ``discard`` do once their flags are read.

Imported only when one of them runs (see :mod:`hopchain.cli.dlq`). Dead letters are chosen
by a query of the index, oldest first; a dry run prints them as they are chosen, so that a
preview of millions holds none of them in memory, then how many it chose by error type and
reason (a :class:`Selection`), and for a redrive how many the redrive limit would refuse.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import typer
from aiokafka.errors import KafkaError

from hopchain.cli.common import ExitCode, quiet_kafka_client
from hopchain.cli.dlq_actions import (
    Outcome,
    Source,
    echo_json,
    opened_index,
    run,
    stream_json,
    terminal,
    with_triage,
)
from hopchain.consumers.config import DlqSettings
from hopchain.consumers.errors import DeadLetterNotFound, TriageError, TriageRefused
from hopchain.consumers.filters import DeadLetterFilter
from hopchain.consumers.index import LetterIndex
from hopchain.consumers.letter import ParkedLetter
from hopchain.consumers.reader import Snapshot
from hopchain.consumers.render import redrive_lines, resolution_json, resolution_text
from hopchain.consumers.triage import Triage

__all__ = ["Resolve", "Selection", "discard", "redrive"]


@dataclass(frozen=True)
class Resolve:
    """What ``redrive`` and ``discard`` share: which dead letters, by whom, why, how."""

    dead_letter_id: str | None
    chosen: DeadLetterFilter
    who: str
    reason: str
    force: bool
    dry_run: bool
    index_path: str | None = None
    """The service's index file to choose from (``--index``), instead of the topics."""

    def letters(self, index: LetterIndex) -> Iterator[ParkedLetter]:
        """The one letter (checked to exist), or every unresolved one the filter picks.

        Oldest first, as the index yields them: a query, not a scan of every letter.

        Raises:
            DeadLetterNotFound: no such id, or the filter picks none.
        """
        if self.dead_letter_id is not None:
            found = index.get(self.dead_letter_id)
            if found is None:
                raise DeadLetterNotFound(self.dead_letter_id)
            yield found[0]
            return
        picked = False
        for letter, _ in index.scan(self.chosen):
            picked = True
            yield letter
        if not picked:
            raise DeadLetterNotFound("", "no unresolved dead letter matches the filter")

    def ids(self, snapshot: Snapshot) -> list[str]:
        """The ids of :meth:`letters`."""
        return [letter.dead_letter_id for letter in self.letters(snapshot.index)]


class Selection:
    """What a dry run chose, counted as it goes: by error type and reason, and over the limit.

    Held in memory are only the counts: there are as many error types and reason codes as
    the vocabulary has (another framework's letters count under their exception's class).

    Args:
        redrive_limit: the redrive limit a redrive is checked against; None for a discard.
    """

    def __init__(self, redrive_limit: int | None) -> None:
        self.redrive_limit = redrive_limit
        self.count = 0
        self.over_limit = 0
        self.groups: Counter[tuple[str, str]] = Counter()

    def add(self, letter: ParkedLetter) -> ParkedLetter:
        """Count one chosen letter; returns it."""
        self.count += 1
        self.groups[letter.error_type, _reason_of(letter)] += 1
        if self.redrive_limit is not None and letter.redrive_count >= self.redrive_limit:
            self.over_limit += 1
        return letter

    def as_json(self) -> dict[str, Any]:
        """The counts, largest group first."""
        body: dict[str, Any] = {
            "count": self.count,
            "by_error_type_and_reason": [
                {"error_type": error_type, "reason": reason, "count": count}
                for (error_type, reason), count in self._largest_first()
            ],
        }
        if self.redrive_limit is not None:
            body["redrive_limit"] = self.redrive_limit
            body["over_redrive_limit"] = self.over_limit
        return body

    def lines(self) -> list[str]:
        """The histogram as aligned plain lines, then what the redrive limit would refuse."""
        groups = self._largest_first()
        if not groups:
            return []
        width = max(len("ERROR TYPE"), *(len(error_type) for (error_type, _), _ in groups))
        reason_width = max(len("REASON"), *(len(reason) for (_, reason), _ in groups))
        lines = [f"{'ERROR TYPE':<{width}}  {'REASON':<{reason_width}}  COUNT"]
        lines += [
            f"{error_type:<{width}}  {reason:<{reason_width}}  {count}"
            for (error_type, reason), count in groups
        ]
        if self.redrive_limit is not None and self.over_limit:
            lines.append(
                f"{self.over_limit} of them were redriven {self.redrive_limit} time(s) already "
                "(HOPCHAIN_DLQ_REDRIVE_LIMIT, counted from their chains): refused unless --force"
            )
        return lines

    def _largest_first(self) -> list[tuple[tuple[str, str], int]]:
        return sorted(self.groups.items(), key=lambda item: (-item[1], item[0]))


def _reason_of(letter: ParkedLetter) -> str:
    """The reason code; else another framework's exception class; else ``-``."""
    if letter.reason:
        return letter.reason
    if letter.foreign is not None and letter.foreign.exception_class:
        return letter.foreign.exception_class.rsplit(".", 1)[-1]
    return "-"


def _preview(
    settings: DlqSettings,
    request: Resolve,
    timeout: float,
    *,
    done: str,
    row: Callable[[ParkedLetter], dict[str, Any]],
    json_output: bool,
) -> None:
    """A dry run, printed as the letters are chosen: nothing is changed or held in memory.

    After the letters: how many, by error type and reason, and for a redrive how many the
    redrive limit would refuse (a letter already redriven that many times).
    """
    verb = {"redriven": "redrive", "discarded": "discard"}[done]
    selection = Selection(settings.dlq_redrive_limit if done == "redriven" else None)

    async def read() -> None:
        async with opened_index(settings, timeout, request.index_path) as snapshot:
            rows = (row(selection.add(letter)) for letter in request.letters(snapshot.index))
            if json_output:
                stream_json(rows, key=done, then=("selected", selection.as_json))
                return
            # Plain lines, a thousand at a write: a preview may name millions of letters.
            while chunk := list(itertools.islice(rows, 1000)):
                typer.echo("\n".join(_would(verb, one) for one in chunk))
            typer.echo(f"would {verb} {selection.count}; nothing was changed")
            if lines := selection.lines():
                typer.echo("\n".join(lines))

    run(settings, read())


def _would(verb: str, row: dict[str, Any]) -> str:
    where = row.get("original_at")
    read = f" (a reference: its original is read again from {where})" if where else ""
    over = " (over the redrive limit: refused unless --force)" if row.get("over_limit") else ""
    return f"would {verb} {row['id']}{read}{over}"


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
        echo_json(outcome)
    else:
        for line, failed in lines:
            terminal(stderr=failed).print(line, markup=False)
    if outcome.get("failed"):
        raise typer.Exit(ExitCode.FAILURE)
    if outcome.get("refused"):
        raise typer.Exit(ExitCode.REFUSED)


def _would_redrive(letter: ParkedLetter, limit: int) -> dict[str, Any]:
    """A dry run's line: the id, where a reference's original is read from, the limit's verdict.

    ``over_limit``: the letter was redriven ``limit`` times already (counted from its chain
    and its ``hopchain-redrive-count``), so the redrive is refused unless forced.
    """
    reference = letter.reference
    where = None
    if reference is not None:
        where = f"{reference.source_topic}[{reference.source_partition}]@{reference.source_offset}"
    return {
        "id": letter.dead_letter_id,
        "dry_run": True,
        "original_at": where,
        "redrive_count": letter.redrive_count,
        "over_limit": letter.redrive_count >= limit,
    }


def _would_discard(letter: ParkedLetter) -> dict[str, Any]:
    return {"id": letter.dead_letter_id, "dry_run": True}


def redrive(source: Source, request: Resolve, *, timeout: float, json_output: bool) -> None:
    """``dlq redrive``: republish to the source topic with a ``redriven`` hop, then resolve."""
    settings = source.settings()
    quiet_kafka_client()

    if request.dry_run:
        limit = settings.dlq_redrive_limit
        _preview(
            settings,
            request,
            timeout,
            done="redriven",
            row=lambda letter: _would_redrive(letter, limit),
            json_output=json_output,
        )
        return

    async def action(snapshot: Snapshot, triage: Triage) -> Outcome:
        ids = request.ids(snapshot)

        async def one(dead_letter_id: str) -> dict[str, Any]:
            done = await triage.redrive(
                dead_letter_id, who=request.who, reason=request.reason, force=request.force
            )
            return {"id": dead_letter_id, "resolution": resolution_json(done.resolution)}

        return await _each(ids, one, done="redriven", single=request.dead_letter_id is not None)

    outcome = run(settings, with_triage(settings, timeout, action, request.index_path))
    lines = redrive_lines(outcome, dry_run=False)
    _finish(outcome, lines, json_output=json_output)


def discard(source: Source, request: Resolve, *, timeout: float, json_output: bool) -> None:
    """``dlq discard``: resolve by dropping, recording who, when and why."""
    settings = source.settings()
    quiet_kafka_client()
    texts: dict[str, str] = {}

    if request.dry_run:
        _preview(
            settings,
            request,
            timeout,
            done="discarded",
            row=_would_discard,
            json_output=json_output,
        )
        return

    async def action(snapshot: Snapshot, triage: Triage) -> Outcome:
        ids = request.ids(snapshot)

        async def one(dead_letter_id: str) -> dict[str, Any]:
            resolution = await triage.discard(
                dead_letter_id, who=request.who, reason=request.reason, force=request.force
            )
            texts[dead_letter_id] = resolution_text(resolution)
            return {"id": dead_letter_id, "resolution": resolution_json(resolution)}

        return await _each(ids, one, done="discarded", single=request.dead_letter_id is not None)

    outcome = run(settings, with_triage(settings, timeout, action, request.index_path))
    discarded = outcome["discarded"]
    if json_output and request.dead_letter_id is not None:
        echo_json(discarded[0]["resolution"])  # one id: its resolution, as before filters
        return
    lines = [(f"discarded {item['id']}: {texts[item['id']]}", False) for item in discarded]
    refused, failed = outcome.get("refused", []), outcome.get("failed", [])
    lines.extend((f"refused {item['id']}: {item['error']}", True) for item in refused)
    lines.extend((f"failed {item['id']}: {item['error']}", True) for item in failed)
    if len(discarded) + len(refused) + len(failed) > 1:
        counts = f"{len(discarded)} discarded, {len(refused)} refused, {len(failed)} failed"
        lines.append((counts, False))
    _finish(outcome, lines, json_output=json_output)
