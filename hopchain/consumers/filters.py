"""Choosing dead letters, and the short texts every view shows of one.

Dead letters are chosen by owner, source topic, dead-letter topic, error type and age; each
is shown with its age, its original record's age and its reason.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from hopchain.consumers.foreign import ParkTime
from hopchain.consumers.letter import ParkedLetter

__all__ = [
    "DeadLetterFilter",
    "age_text",
    "format_age",
    "original_age_text",
    "parse_duration",
    "reason_text",
]

_DURATION = re.compile(r"^\s*(?P<amount>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|m|h|d|w)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``2h``, ``1.5d`` or ``1w``.

    Raises:
        ValueError: the text is not a duration; the message shows the accepted forms.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration; write a number with an optional unit: "
            "ms, s, m, h, d or w (e.g. 90s, 15m, 2h)"
        )
    return float(match["amount"]) * _UNIT_SECONDS[match["unit"] or "s"]


def format_age(seconds: float) -> str:
    """A short age for people: ``42s``, ``17m``, ``5h12m``, ``3d4h``."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


_BOUNDS = {ParkTime.ORIGINAL.value: "<=", ParkTime.FIRST_READ.value: ">="}
"""The marker of an age that is a bound, not a measure: the park time was not recorded."""


def age_text(letter: ParkedLetter, now: float) -> str:
    """How long ago it was parked, marked when that is a bound.

    ``<=`` marks an upper bound (counted from the original's time), ``>=`` a lower one
    (counted from when the service first read it).
    """
    bound = _BOUNDS.get(letter.parked_at_basis or "", "")
    return bound + format_age(now - letter.parked_at)


def original_age_text(letter: ParkedLetter, now: float) -> str:
    """How long ago the original record was written, or ``-`` when unknown."""
    return "-" if letter.source_timestamp is None else format_age(now - letter.source_timestamp)


def reason_text(letter: ParkedLetter) -> str:
    """The reason code; another framework's exception, root cause and message; or ``-``."""
    if letter.reason is not None:
        return letter.reason
    if letter.description is not None:
        return letter.description
    return "-" if letter.problem is None else "unreadable"


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters an operation applies to. Unset fields match everything."""

    owner: str | None = None
    source_topic: str | None = None
    dead_letter_topic: str | None = None
    error_type: str | None = None
    min_age_seconds: float | None = None

    @property
    def is_empty(self) -> bool:
        """Whether the filter would choose every dead letter."""
        return all(
            value is None
            for value in (
                self.owner,
                self.source_topic,
                self.dead_letter_topic,
                self.error_type,
                self.min_age_seconds,
            )
        )

    def predicate(self, now: float | None = None) -> Callable[[ParkedLetter], bool]:
        """A test for one dead letter, with ages measured from ``now`` (Unix seconds)."""
        moment = time.time() if now is None else now

        def accept(letter: ParkedLetter) -> bool:
            return (
                (self.owner is None or letter.owner == self.owner)
                and (self.source_topic is None or letter.source_topic == self.source_topic)
                and (self.dead_letter_topic is None or letter.topic == self.dead_letter_topic)
                and (self.error_type is None or letter.error_type == self.error_type)
                and (
                    self.min_age_seconds is None
                    or moment - letter.parked_at >= self.min_age_seconds
                )
            )

        return accept
