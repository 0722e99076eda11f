"""The two readers under fuzzing, and what counts as an outcome and what as a crash.

``codec``: ``EnvelopeCodec.decode``. Its outcomes are an accepted record or a
``DecodeError`` with a reason code and a JSON path (DESIGN.md principle 13).

``dlq``: the dead-letter service's reader, ``IndexReader.apply``, for a record of a
dead-letter topic or of the resolutions topic, exactly as the service loop calls it. Its
outcomes are an index entry (a dead letter, salvaged if its headers are unreadable, whose
JSON the HTTP API can render) or, for the resolutions topic, a resolution, a claim, an
ignored record or a refusal (``read_resolution_record``'s ``ValueError``). The reader
catches everything so that the loop survives; an exception it had to catch (logged as
"could not index") is a crash here: the record is missing from the index.

Anything else is a crash, named by its exception type and the innermost hopchain frame.
"""

from __future__ import annotations

import base64
import logging
import re
import traceback
from functools import cache
from pathlib import Path
from typing import Any, cast

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord
from fuzz_cases import CODEC, RESOLUTION_KEY, RESOLUTIONS_TOPIC, Case, generator

import hopchain
from hopchain.config import HopchainConfig
from hopchain.consumers.index import DeadLetterIndex
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.reader import IndexReader
from hopchain.consumers.resolutions import is_clock_probe, read_resolution_record
from hopchain.consumers.topics import TopicPlan
from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import EnvelopeCodec, Keyring

__all__ = ["KNOWN_CRASHES", "BrokenVerdictError", "outcome", "signature"]

KNOWN_CRASHES: dict[str, str] = {}
"""Crashes of the schema-2 reader found by the fuzzers and kept in ``tests/vectors/crashes``
(the value names the vector), while they are being fixed; none is left. A crash not listed
here fails the fuzz tests. Remove an entry when its vector passes."""

_HOPCHAIN = str(Path(hopchain.__file__).parent) + "/"
_LOGGER = logging.getLogger("hopchain.dlq")


class BrokenVerdictError(Exception):
    """A refusal without a reason code or without a JSON path: not a verdict."""


def signature(error: BaseException) -> str:
    """``Type in module.py:function: message``: the exception, the innermost hopchain frame
    and the message without its particulars (numbers, surrogates), one line."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if frame.filename.startswith(_HOPCHAIN)]
    message = re.sub(r"\\u[0-9a-fA-F]{4}|[\ud800-\udfff]", "?", str(error))
    message = re.sub(r"\d+", "N", message)[:80]
    if not frames:
        return f"{type(error).__name__}: {message}"
    frame = (ours or frames)[-1]
    where = frame.filename.removeprefix(_HOPCHAIN) if ours else Path(frame.filename).name
    return f"{type(error).__name__} in {where}:{frame.name}: {message}"


def outcome(case: Case) -> str:
    """The reader's verdict on ``case``; raises whatever the reader raised if it crashed."""
    if case.target == CODEC:
        return _read_codec(case)
    return _read_dlq(case)


@cache
def _codec(*, keyed: bool) -> EnvelopeCodec:
    gen = generator()
    keyring = None
    if keyed:
        public = {
            component: [bytes.fromhex(key) for key in keys]
            for component, keys in gen.public_keys().items()
        }
        keyring = Keyring(gen.KEYS, verifying=public)
    return EnvelopeCodec(gen.registry(), keyring=keyring)


def _read_codec(case: Case) -> str:
    codec = _codec(keyed=case.keyed)  # every hop is parsed, whatever case.full_check says
    try:
        codec.decode(case.topic, case.value, case.headers)
    except DecodeError as error:
        if not isinstance(error.code, ReasonCode) or not error.path.startswith("$"):
            raise BrokenVerdictError(f"refusal {error.code!r} at {error.path!r}") from error
        return f"refused:{error.code.value}"
    return "accepted"


class _Caught(logging.Handler):
    """Keeps the exceptions the reader caught and logged (``logger.exception``)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])


@cache
def _settings(*, keyed: bool) -> HopchainConfig:
    if keyed:
        return HopchainConfig(dlq_resolution_key=base64.b64encode(RESOLUTION_KEY).decode())
    return HopchainConfig()


@cache
def _caught() -> _Caught:
    handler = _Caught()
    _LOGGER.addHandler(handler)
    return handler


def _read_dlq(case: Case) -> str:
    settings = _settings(keyed=case.keyed)
    plan = TopicPlan(resolutions_topic=RESOLUTIONS_TOPIC)
    index = DeadLetterIndex()
    # The admin client is used only to look for topics, never to read a record.
    reader = IndexReader(
        settings, plan, index, DlqMetrics(index), cast("AIOKafkaAdminClient", None)
    )
    raw: Any = ConsumerRecord(
        topic=case.topic,
        partition=0,
        offset=7,
        timestamp=case.timestamp_ms,
        timestamp_type=0,
        key=case.key,
        value=case.value,
        checksum=None,
        serialized_key_size=len(case.key or b""),
        serialized_value_size=len(case.value or b""),
        headers=case.headers,
    )
    caught = _caught()
    caught.errors.clear()
    previous = _LOGGER.level, _LOGGER.propagate
    _LOGGER.setLevel(logging.ERROR)
    _LOGGER.propagate = False
    try:
        reader.apply(raw)
    finally:
        _LOGGER.setLevel(previous[0])
        _LOGGER.propagate = previous[1]
    if caught.errors:
        raise caught.errors[0]
    if case.topic == RESOLUTIONS_TOPIC:
        if is_clock_probe(case.headers):
            return "resolutions:clock_probe"
        try:
            read = read_resolution_record(
                case.key, case.value, case.headers, settings.resolution_key()
            )
        except ValueError:
            return "resolutions:refused"
        if read.ignored is not None:
            return f"resolutions:ignored:{read.ignored.value}"
        return "resolutions:claim" if read.claim is not None else "resolutions:resolution"
    [(letter, _)] = index.select(include_resolved=True)
    letter.as_json()  # what the HTTP API and the console show of it
    kind = "salvaged" if letter.problem is not None else "indexed"
    return f"dead-letter:{kind}:{letter.framework}"


def reaches(verdict: str, expect: dict[str, Any] | None) -> bool:
    """Whether ``verdict`` is what a crash vector's ``expect`` asks for.

    ``{"verdict": "refused", "reasons": [...]}``: a refusal with one of the reason codes
    (any code when the list is empty); ``{"verdict": "dead-letter"}``: an index entry.
    A fuzzer's crash file has no ``expect``: any verdict will do.
    """
    if expect is None:
        return True
    if expect["verdict"] == "refused":
        reasons: list[str] = expect["reasons"]
        code = verdict.removeprefix("refused:")
        return verdict.startswith("refused:") and (not reasons or code in reasons)
    return verdict.startswith(f"{expect['verdict']}:")
