"""How long a partition waits while its schema registry does not answer: :class:`RegistryBackoff`.

A registry that is down is not a malformed record: nothing is parked for it, the record is
read again. Read again at once, thousands of records would hammer a registry that is
restarting; read again after a fixed pause, a long outage is retried as often as a blip.
So the pause grows with each failure in a row on a partition (0.5 s, 1 s, 2 s ... up to
30 s by default), with jitter so that many stages restarted together do not ask the
registry at the same instant, and starts again from the first pause once a record of that
partition is read (on FastStream's per-record path: handled and its output sent, or
parked, since an output the registry could not frame pauses the partition too).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hopchain.exceptions import ConfigurationError, SchemaRegistryUnavailable

if TYPE_CHECKING:
    from hopchain.schemas.record import ConsumedRecord

__all__ = [
    "DEFAULT_FIRST_PAUSE",
    "DEFAULT_LONGEST_PAUSE",
    "RegistryBackoff",
    "log_registry_pause",
    "refuse_longer_than_poll_interval",
    "registry_failed",
]

logger = logging.getLogger("hopchain")

DEFAULT_FIRST_PAUSE = 0.5
"""Seconds of the first pause after the registry did not answer, by default."""
DEFAULT_LONGEST_PAUSE = 30.0
"""Seconds the pause grows to at most, by default: a registry back up is noticed that soon."""

Partition = tuple[str, int]


class RegistryBackoff:
    """The growing pause of each partition whose records the registry could not help read.

    Args:
        first: seconds of the first pause.
        longest: the pause doubles with each failure in a row up to this many seconds.
        jitter: the fraction of a pause drawn at random and taken off it (0: none), so that
            the partitions and stages of one estate do not retry in step.
        clock: monotonic seconds (a test's clock).
        draw: uniform draws in [0, 1) for the jitter.

    Raises:
        ConfigurationError: a pause that is not positive, ``longest`` below ``first``, or a
            jitter outside [0, 1).
    """

    def __init__(
        self,
        *,
        first: float = DEFAULT_FIRST_PAUSE,
        longest: float = DEFAULT_LONGEST_PAUSE,
        jitter: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
    ) -> None:
        if not (first > 0 and longest >= first and 0 <= jitter < 1):
            raise ConfigurationError(
                f"RegistryBackoff needs 0 < first <= longest and 0 <= jitter < 1, got "
                f"first={first}, longest={longest}, jitter={jitter}"
            )
        self.first = first
        self.longest = longest
        self.jitter = jitter
        self._clock = clock
        self._draw = draw
        self._failures: dict[Partition, int] = {}
        self._until: dict[Partition, float] = {}

    def failed(self, topic: str, partition: int) -> float:
        """The registry did not answer for a record of ``topic``/``partition``: the next pause.

        Each failure in a row doubles the pause, up to ``longest``; jitter shortens it by
        up to ``jitter`` of itself.
        """
        key = (topic, partition)
        count = self._failures.get(key, 0)
        self._failures[key] = count + 1
        # 2 ** count grows without bound; past the cap its size does not matter.
        pause = min(self.longest, self.first * 2.0 ** min(count, 64))
        pause -= pause * self.jitter * self._draw()
        self._until[key] = self._clock() + pause
        return pause

    def succeeded(self, topic: str, partition: int) -> None:
        """A record of ``topic``/``partition`` was read: its next outage starts from ``first``."""
        if self._failures:
            key = (topic, partition)
            self._failures.pop(key, None)
            self._until.pop(key, None)

    def remaining(self, topic: str, partition: int) -> float:
        """Seconds left of the partition's current pause (0 when it is not paused)."""
        until = self._until.get((topic, partition))
        if until is None:
            return 0.0
        return max(0.0, until - self._clock())

    def longest_remaining(self) -> float:
        """Seconds left of the longest pause of any partition (0 when none is paused)."""
        if not self._until:
            return 0.0
        return max(0.0, max(self._until.values()) - self._clock())

    async def wait_out(self) -> None:
        """Wait until no partition's pause is running (a plain consumer's next read)."""
        left = self.longest_remaining()
        if left > 0:
            await asyncio.sleep(left)

    def failures(self, topic: str, partition: int) -> int:
        """Failures in a row on ``topic``/``partition`` since a record of it was last read."""
        return self._failures.get((topic, partition), 0)


def refuse_longer_than_poll_interval(
    backoff: RegistryBackoff, interval_ms: object, setting: str
) -> None:
    """Refuse a longest pause a plain consumer's read could not wait out in its group.

    A read waits out the pause before it polls again: one longer than the poll interval
    would make the consumer leave its group during every outage.

    Raises:
        ConfigurationError: ``interval_ms`` (the consumer's ``setting``) is not longer than
            ``backoff.longest``.
    """
    try:
        interval = float(str(interval_ms))
    except ValueError:
        return  # the client refuses it itself
    if interval <= backoff.longest * 1000:
        raise ConfigurationError(
            f"the registry backoff's longest pause ({backoff.longest:g} s) must be shorter "
            f"than the consumer's {setting} ({interval:.0f} ms): a read waiting it out would "
            "leave the consumer group; lower RegistryBackoff(longest=...) or raise "
            f"{setting}"
        )


def registry_failed(
    backoff: RegistryBackoff,
    counter: Any,
    where: str,
    record: ConsumedRecord,
    exc: SchemaRegistryUnavailable,
) -> float:
    """Count, pause and log a record the registry could not help read; the pause's seconds.

    ``counter``: ``hopchain_schema_registry_unavailable_total``. The pause is also set as
    the exception's ``retry_after``, for a caller that backs off itself.
    """
    pause = backoff.failed(record.topic, record.partition)
    counter.labels(record.topic).inc()
    exc.retry_after = pause
    log_registry_pause(where, record.topic, record.partition, pause, exc)
    return pause


def log_registry_pause(
    where: str, topic: str, partition: int, pause: float, exc: Exception
) -> None:
    """One line per pause: which records wait, how long, and what the registry did."""
    logger.warning(
        "the schema registry did not answer for %s (%s); nothing is parked, %s/%d is read "
        "again in %.1f s",
        where,
        exc,
        topic,
        partition,
        pause,
        extra={
            "hopchain_event": "schema_registry_unavailable",
            "topic": topic,
            "partition": partition,
            "pause_seconds": round(pause, 3),
        },
    )
