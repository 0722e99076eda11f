"""hopchain's own log lines: a timestamp, the level and the logger's name on every one.

hopchain logs under ``hopchain`` (the middleware) and ``hopchain.*`` (``hopchain.dlq`` for the
dead-letter service, ...). Without a handler anywhere, Python prints a library's warnings as
the bare message and drops its INFO lines. So, as FastStream gives its ``faststream`` logger
a handler and the INFO level when it is imported, hopchain gives ``hopchain`` a
:class:`FallbackHandler` and the level of :class:`LogSettings` (INFO unless told otherwise)
when it is imported: the level only if the logger has none yet and nobody configured
logging, and only until the application does (see :func:`configure_logging`).

Unlike FastStream's handler, this one never competes with the application's configuration:
a record that a handler of the application will take (on the root logger, on ``hopchain``
or on a logger in between, found when the record is written) is left to that handler. So
``logging.basicConfig``, ``dictConfig``, ``faststream run --log-config``, uvicorn's set-up or
pytest's capture take hopchain's lines as they take any other, written once, never
reformatted, and hopchain's handler only speaks when nobody else would.

The line format is the argument given to :class:`LogSettings`, else ``HOPCHAIN_LOG_FORMAT``,
else ``text``; ``json`` writes one JSON object per line, for log shippers. The level is an
argument only (INFO by default): ``HOPCHAIN_LOG_LEVEL`` already sets the level of
``hopchain dlq serve``, whose command line reports an invalid one. :class:`JsonFormatter`
is public, so that an application's own logging configuration can write the same lines.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, Literal

from hopchain.exceptions import ConfigurationError

__all__ = [
    "FORMAT_VARIABLE",
    "LOGGER_NAME",
    "FallbackHandler",
    "JsonFormatter",
    "LogSettings",
    "TextFormatter",
    "configure_logging",
]

LOGGER_NAME = "hopchain"
"""The root of hopchain's logger hierarchy."""
FORMAT_VARIABLE = "HOPCHAIN_LOG_FORMAT"

LineFormat = Literal["text", "json"]
_FORMATS: tuple[LineFormat, ...] = ("text", "json")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# What every LogRecord has; anything else on a record came from ``extra=`` and is a field.
_STANDARD_ATTRIBUTES = frozenset(
    {*vars(logging.LogRecord("", 0, "", 0, "", None, None)), "message", "asctime", "taskName"}
)


class LogSettings:
    """How hopchain writes its log lines when the application has not configured logging.

    Args:
        line_format: ``text`` or ``json``; None reads ``HOPCHAIN_LOG_FORMAT``.
        level: a level name or number for the ``hopchain`` logger.

    Raises:
        ConfigurationError: a value (given or from the environment) is not one of these.
    """

    def __init__(self, *, line_format: str | None = None, level: str | int = logging.INFO) -> None:
        self.line_format: LineFormat = _line_format(line_format)
        """``text`` (the default): ``2026-01-02 10:00:00,123 WARNING  hopchain - message``;
        ``json``: one object per line with ``ts``, ``level``, ``logger``, ``message`` and the
        line's structured fields (``HOPCHAIN_LOG_FORMAT``)."""
        self.level: int = _level(level)
        """The ``hopchain`` logger's level, if the application gave it none: ``INFO`` by
        default, as FastStream's own logger."""

    def formatter(self) -> logging.Formatter:
        """The formatter of this line format."""
        return JsonFormatter() if self.line_format == "json" else TextFormatter()


def _line_format(given: str | None) -> LineFormat:
    from_environment = given is None
    text = (os.environ.get(FORMAT_VARIABLE, "text") if given is None else given).strip().lower()
    for known in _FORMATS:
        if text == known:
            return known
    where = f"{FORMAT_VARIABLE}={text!r}" if from_environment else f"line_format={text!r}"
    raise ConfigurationError(f"{where} is not a log format; use text or json")


def _level(given: str | int) -> int:
    if isinstance(given, int):
        return given
    text = given.strip().upper()
    if text in _LEVELS:
        return logging.getLevelNamesMapping()[text]
    raise ConfigurationError(f"level={given!r} is not a log level; use one of {', '.join(_LEVELS)}")


class TextFormatter(logging.Formatter):
    """``asctime level logger - message``: FastStream's time stamp, and who wrote the line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-8s %(name)s - %(message)s")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, then the fields.

    The fields are what the line was logged with as ``extra=`` (a refusal's ``reason``,
    ``path``, ``topic``, ``partition``, ``offset``, ...); ``exc`` holds a traceback, if any.
    ``ts`` is ISO 8601 in UTC, to the millisecond.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD_ATTRIBUTES and name not in line:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


class FallbackHandler(logging.Handler):
    """Writes a hopchain record to stderr, unless a handler of the application will take it.

    stderr is looked up for every line, so a redirected ``sys.stderr`` is followed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lent_level: int | None = None
        """The level this handler's set-up gave the ``hopchain`` logger when nobody had
        configured logging; handed back (the logger follows the application's levels again)
        once an application handler takes hopchain's lines."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record, if nobody else will."""
        if self._handled_elsewhere(record):
            self._hand_back_level()
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging never breaks the caller; it reports it
            self.handleError(record)

    def _handled_elsewhere(self, record: logging.LogRecord) -> bool:
        """Whether the record meets another handler on its way up the logger hierarchy."""
        current: logging.Logger | None = logging.getLogger(record.name)
        while current is not None:
            if any(not isinstance(handler, FallbackHandler) for handler in current.handlers):
                return True
            if not current.propagate:
                return False
            current = current.parent
        return False

    def _hand_back_level(self) -> None:
        # An application that configured logging after importing hopchain (basicConfig at
        # WARNING in its main()) gets its levels back; at most this one line came through.
        logger = logging.getLogger(LOGGER_NAME)
        if self.lent_level is not None and logger.level == self.lent_level:
            logger.setLevel(logging.NOTSET)
        self.lent_level = None


def configure_logging(settings: LogSettings | None = None, *, explicit: bool = True) -> None:
    """Give the ``hopchain`` logger its fallback handler with ``settings``' format and level.

    Called with ``explicit=False`` when hopchain is imported: the level is then set only if
    the logger has none and the application has not configured logging yet (the root logger
    has no handler), and only until an application handler takes hopchain's lines, so an
    application's levels stay as it set them. Called again, e.g.
    ``configure_logging(LogSettings(line_format="json"))``, it changes the format and sets
    the level for good; a handler of the application still takes precedence (see the
    module's documentation).
    """
    settings = settings if settings is not None else LogSettings()
    logger = logging.getLogger(LOGGER_NAME)
    handler = next((each for each in logger.handlers if isinstance(each, FallbackHandler)), None)
    if handler is None:
        handler = FallbackHandler()
        logger.addHandler(handler)
    handler.setFormatter(settings.formatter())
    if explicit:
        logger.setLevel(settings.level)
        handler.lent_level = None
    elif logger.level == logging.NOTSET and not logging.getLogger().handlers:
        logger.setLevel(settings.level)
        handler.lent_level = settings.level
