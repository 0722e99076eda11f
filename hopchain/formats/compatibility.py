"""Contracts checked against their schema registry before anything is read or written.

For every contract with a registry payload format: its subject must be in the registry (unless
the format may register it, ``auto_register=True``), and the contract's schema must be
compatible with the subject's latest version, as the registry itself judges it (Confluent's
``POST /compatibility/subjects/{subject}/versions/latest``) under the subject's compatibility
level. Set that level on the subject: registries differ in what they assume without one. The
middleware's ``prepare()`` and ``hopchain schema check`` both ask this module; each problem is
one line.

A registry that does not answer is a problem too, reported once per registry: the subjects it
holds could not be checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import quote

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError

from hopchain.exceptions import ConfigurationError
from hopchain.formats.registry import (
    REGISTRY_URL_SETTING,
    RegistryFormat,
    is_unavailable,
    registry_client,
    registry_url,
    unavailable,
)

if TYPE_CHECKING:
    from hopchain.schemas.contracts import TopicContract

__all__ = ["Problem", "ProblemKind", "RegistryCheck", "check_contracts"]

_SCHEMA_TYPES = {"avro": "AVRO", "json_schema": "JSON", "protobuf": "PROTOBUF"}
"""The registry's name of each payload format's schema type."""
_NOT_FOUND = 404
_MESSAGE_CHARS = 300
"""Enough of the registry's explanation to act on; a whole schema diff is for its own UI."""
_REASONS_TIMEOUT_SECONDS = 5.0


class ProblemKind(StrEnum):
    """What is wrong between a contract and its registry."""

    MISSING_SUBJECT = "missing_subject"
    """The subject is not in the registry, and the format may not register it."""
    INCOMPATIBLE = "incompatible"
    """The registry judges the contract's schema incompatible with the subject's latest."""
    UNREACHABLE = "unreachable"
    """The registry did not answer (or answered 5xx, 429, or refused the login)."""
    REFUSED = "refused"
    """The registry answered the check with another error (e.g. it cannot parse the schema)."""
    NOT_CONFIGURED = "not_configured"
    """No registry is given for the contract, or its subject cannot be named."""


@dataclass(frozen=True)
class Problem:
    """One thing to fix, as one line."""

    kind: ProblemKind
    line: str
    topics: tuple[str, ...]
    subject: str | None = None

    def __str__(self) -> str:
        return self.line


@dataclass(frozen=True)
class RegistryCheck:
    """What a check found: the subjects checked and the problems, in contract order."""

    checked: tuple[tuple[str, str], ...]
    """(topic, subject) of every contract whose registry answered the check."""
    problems: tuple[Problem, ...]

    @property
    def unreachable_only(self) -> bool:
        """Every problem is a registry that did not answer (and there is at least one)."""
        return bool(self.problems) and all(
            problem.kind is ProblemKind.UNREACHABLE for problem in self.problems
        )


def _quoted(topics: Iterable[str]) -> str:
    return ", ".join(repr(topic) for topic in topics)


def check_contracts(
    contracts: Iterable[TopicContract], *, default_url: str | None = None
) -> RegistryCheck:
    """Check every contract with a registry payload format against its registry.

    Blocking HTTP: one or two requests per contract (run it in a thread from async code).

    Args:
        contracts: the contracts; those with JSON payloads are skipped.
        default_url: the registry of formats that name none, instead of their engine's
            (``HopchainConfig.schema_registry_url``) or ``HOPCHAIN_SCHEMA_REGISTRY_URL``.
    """
    by_url: dict[str | None, list[tuple[TopicContract, RegistryFormat]]] = {}
    for contract in contracts:
        payload_format = contract.payload_format
        if payload_format is None:
            continue
        try:
            url: str | None = registry_url(
                payload_format.registry_url or default_url or payload_format.configured_url
            )
        except ConfigurationError:
            url = None
        by_url.setdefault(url, []).append((contract, payload_format))

    checked: list[tuple[str, str]] = []
    problems: list[Problem] = []
    unconfigured = by_url.pop(None, [])
    if unconfigured:
        topics = tuple(contract.topic for contract, _ in unconfigured)
        problems.append(
            Problem(
                ProblemKind.NOT_CONFIGURED,
                f"topic(s) {_quoted(topics)} carry registry payloads but no schema registry is "
                f"given: set {REGISTRY_URL_SETTING} (or give the format registry_url=...)",
                topics,
            )
        )
    for url, members in by_url.items():
        assert url is not None  # noqa: S101 - the None group was taken out above
        _check_registry(registry_client(url), url, members, checked, problems)
    return RegistryCheck(tuple(checked), tuple(problems))


def _check_registry(
    client: SchemaRegistryClient,
    url: str,
    members: list[tuple[TopicContract, RegistryFormat]],
    checked: list[tuple[str, str]],
    problems: list[Problem],
) -> None:
    """Check the contracts of one registry; the first time it does not answer, stop there."""
    for index, (contract, payload_format) in enumerate(members):
        topic = contract.topic
        try:
            subject = payload_format.subject(topic)
        except ConfigurationError as exc:
            problems.append(
                Problem(ProblemKind.NOT_CONFIGURED, f"topic {topic!r}: {exc}", (topic,))
            )
            continue
        schema = Schema(payload_format.schema, _SCHEMA_TYPES[payload_format.kind.value])
        try:
            # Asked first: a registry may judge a schema "compatible" with a subject it does
            # not have (Apicurio does), and that verdict would hide the missing subject.
            client.get_versions(subject)
            compatible = client.test_compatibility(subject, schema)
        except (SchemaRegistryError, httpx.TransportError) as exc:
            if is_unavailable(exc) or not isinstance(exc, SchemaRegistryError):
                rest = tuple(member.topic for member, _ in members[index:])
                problems.append(
                    Problem(
                        ProblemKind.UNREACHABLE,
                        f"{unavailable(url, exc)}: the subjects of topic(s) {_quoted(rest)} "
                        "were not checked",
                        rest,
                    )
                )
                return
            problem = _refusal(exc, topic, subject, url, payload_format)
            if problem is not None:
                problems.append(problem)
            continue
        checked.append((topic, subject))
        if not compatible:
            said = _messages(url, subject, schema)
            problems.append(
                Problem(
                    ProblemKind.INCOMPATIBLE,
                    f"topic {topic!r}: the contract's {payload_format.kind} schema is not "
                    f"compatible with the latest version of subject {subject!r}"
                    + (f" (the registry says: {said})" if said else ""),
                    (topic,),
                    subject,
                )
            )


def _refusal(
    exc: SchemaRegistryError, topic: str, subject: str, url: str, payload_format: RegistryFormat
) -> Problem | None:
    """The problem for an error answer to the check; None for a subject it may register."""
    if exc.http_status_code == _NOT_FOUND:
        if payload_format.auto_register:
            return None  # the format registers its schema with the first record it writes
        return Problem(
            ProblemKind.MISSING_SUBJECT,
            f"topic {topic!r}: subject {subject!r} is not in the schema registry at {url}; "
            "register the contract's schema there, or give the format auto_register=True",
            (topic,),
            subject,
        )
    return Problem(
        ProblemKind.REFUSED,
        f"topic {topic!r}: the schema registry at {url} refused to check the contract's schema "
        f"against subject {subject!r}: HTTP {exc.http_status_code}: "
        f"{exc.error_message}"[: _MESSAGE_CHARS * 2],
        (topic,),
        subject,
    )


def _messages(url: str, subject: str, schema: Schema) -> str:
    """The registry's reasons for an incompatibility, when it gives them; else "".

    ``test_compatibility`` answers yes or no; the reasons come with the same request in its
    verbose form (Confluent's registry gives them, Apicurio does not), asked here with the
    HTTP library the registry client itself uses. Best effort: the verdict stands without.
    """
    try:
        answer = httpx.post(
            f"{url}/compatibility/subjects/{quote(subject, safe='')}/versions/latest",
            params={"verbose": "true"},
            json=schema.to_dict(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
            timeout=_REASONS_TIMEOUT_SECONDS,
        )
        messages = answer.json().get("messages")
    except Exception:  # noqa: BLE001 - the verdict is already known; its reasons are extra
        return ""
    if not isinstance(messages, list):
        return ""
    return "; ".join(" ".join(str(message).split()) for message in messages)[:_MESSAGE_CHARS]
