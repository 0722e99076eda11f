"""Three judges of a mutated record, and the class of any disagreement between them.

* the exported JSON Schema under python-jsonschema;
* the same schema under ajv, every record in one node process (``tests/vectors/ajv_batch.mjs``);
* the reader, :meth:`EnvelopeCodec.decode` (accept: no ``DecodeError``).

A schema verdict is ``accept`` when every document of the record is JSON and valid (headers
mode: the ``hopchain-envelope`` header against the envelope schema and the value against the
payload schema; body mode: the value against the topic's schema), ``unparsed`` when one is not
JSON (nor UTF-8), else ``reject``.

A disagreement between the schema and the reader is either something a JSON Schema can say
(it must not happen), or one of the checks ``SPEC.md`` section 8 leaves to the reader.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps
from mutation_records import BODY_TOPIC, HEADERS_TOPIC, KEYS, Draft, Record, registry
from mutations import Mutation

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import EnvelopeCodec, Keyring, envelope_schema, topic_schema

__all__ = [
    "AGREE",
    "EXPRESSIBLE",
    "LEFT_TO_READER",
    "PENDING",
    "Judgement",
    "Reading",
    "ajv_verdicts",
    "judge",
    "schemas",
    "summary",
]

AJV = Path(__file__).parents[2] / ".cache" / "node" / "node_modules"
BATCH = Path(__file__).parents[1] / "vectors" / "ajv_batch.mjs"

AGREE = "agree"
BINDING = "the last hop's destination, contract and payload digest"
EXPRESSIBLE = "a JSON Schema can express this"
LEFT_TO_READER = {
    "canonical form": "not_canonical, or a spelling the schema cannot see (1.0 for 1)",
    "duplicate members": "bad_json: a member twice",
    "digests": "bad_digest, or digests that do not number one per hop",
    "signatures": "unsigned_hop, bad_signature, or not one signature per hop",
    BINDING: "truncated_chain, contract_mismatch, unexpected_writer, payload_mismatch",
    "traceparent": "bad_traceparent",
    "headers": "duplicate_header, missing_header, a header not UTF-8, hopchain-degraded",
}
"""Exactly the list of SPEC.md section 8."""
PENDING = {
    "reader crash": "the reader raised something other than DecodeError",
}
"""Disagreements that must not happen: the reader refuses any input with a reason code."""

_BINDING = {
    ReasonCode.TRUNCATED_CHAIN,
    ReasonCode.CONTRACT_MISMATCH,
    ReasonCode.UNEXPECTED_WRITER,
    ReasonCode.PAYLOAD_MISMATCH,
}


@dataclass(frozen=True)
class Reading:
    """What the reader said about a record."""

    code: ReasonCode | None = None
    path: str = ""
    detail: str = ""
    crash: str | None = None

    @property
    def accepted(self) -> bool:
        return self.code is None and self.crash is None

    def __str__(self) -> str:
        if self.crash is not None:
            return f"crash {self.crash}"
        return "accept" if self.code is None else f"{self.code.value} at {self.path}"


@dataclass(frozen=True)
class Judgement:
    """The verdicts on one mutation, and the class of their disagreement."""

    mutation: Mutation
    python: str
    ajv: str | None
    reader: Reading
    verdict_class: str

    def describe(self) -> str:
        m = self.mutation
        return (
            f"{m.name} ({m.base}; {m.description}): python-jsonschema {self.python}, "
            f"ajv {self.ajv}, reader {self.reader} -> {self.verdict_class}"
        )


def schemas(max_hops: int = 64) -> dict[str, dict[str, Any]]:
    """The exported schemas the records are judged by, by document kind."""
    return {
        "headers": envelope_schema(max_hops=max_hops),
        "payload": topic_schema(registry(), HEADERS_TOPIC, max_hops=max_hops),
        "body": topic_schema(registry(), BODY_TOPIC, max_hops=max_hops),
    }


def documents(record: Record) -> list[tuple[str, bytes | None]]:
    """Each document of the record with the schema that judges it."""
    if record.body:
        return [("body", record.value)]
    return [("headers", record.envelope_text()), ("payload", record.value)]


class _NotJsonError(ValueError):
    pass


def _no_constant(name: str) -> NoReturn:
    raise _NotJsonError(name)


def parse(text: bytes | None) -> tuple[bool, Any]:
    """A document as JSON.parse reads it (the last of duplicate members wins), if it is JSON."""
    if text is None:
        return False, None
    try:
        return True, json.loads(text.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return False, None


def python_verdict(record: Record, validators: dict[str, Draft202012Validator]) -> str:
    verdict = "accept"
    for kind, text in documents(record):
        parsed, document = parse(text)
        if not parsed:
            return "unparsed"
        if not validators[kind].is_valid(document):
            verdict = "reject"
    return verdict


def ajv_verdicts(
    mutations: list[Mutation], schema_set: dict[str, dict[str, Any]]
) -> dict[str, str] | None:
    """Every record judged by ajv in one node process; None when node or ajv is missing."""
    node = shutil.which("node")
    if node is None or not (AJV / "ajv").is_dir():
        return None
    records = [
        {
            "name": mutation.name,
            "documents": [
                [kind, None if text is None else base64.b64encode(text).decode()]
                for kind, text in documents(mutation.record)
            ],
        }
        for mutation in mutations
    ]
    with tempfile.TemporaryDirectory() as folder:
        batch = Path(folder) / "batch.json"
        batch.write_text(json.dumps({"schemas": schema_set, "records": records}), "utf-8")
        result = subprocess.run(  # noqa: S603 - fixed arguments
            [node, str(BATCH), str(AJV), str(batch)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    verdicts: dict[str, str] = json.loads(result.stdout)
    return verdicts


def read(record: Record, *, max_hops: int | None = None) -> Reading:
    """The reader's verdict."""
    keyring = Keyring(KEYS) if record.keyed else None
    codec = EnvelopeCodec(registry(), keyring=keyring)
    if max_hops is not None:
        codec.limits = type(codec.limits)(max_hops=max_hops)
    try:
        codec.decode(record.topic, record.value, list(record.headers))
    except DecodeError as exc:
        return Reading(exc.code, exc.path, exc.detail)
    except Exception as exc:  # noqa: BLE001 - a crash is a verdict of its own here
        return Reading(crash=f"{type(exc).__name__}: {str(exc)[:120]}")
    return Reading()


def _integral(text: str) -> Any:
    number = Decimal(text)
    return int(number) if number == number.to_integral_value() else float(text)


def canonical_twin(record: Record) -> Record | None:
    """The record the schema saw, written by a writer: one spelling, digests and headers anew.

    Numbers spelled as JSON Schema reads them (``1.0`` is 1), duplicate members as JSON.parse
    keeps them (the last), every object in RFC 8785 form. None when it has no such form.
    """
    texts = dict(documents(record))
    main = texts.get("body") if record.body else texts.get("headers")
    if main is None:
        return None
    try:
        document = json.loads(main, parse_float=_integral)
        payload_text = record.value if not record.body else None
        payload = document.pop("payload") if record.body else json.loads(payload_text or b"")
        draft = Draft(
            topic=record.topic,
            identity={
                k: v for k, v in document.items() if k not in {"chain", "digests", "signatures"}
            },
            hops=list(document["chain"]),
            signatures=list(document["signatures"]),
            payload=b"",
            keyed=record.keyed,
        )
        draft.set_payload(json.dumps(payload, separators=(",", ":")).encode())
        return draft.seal()
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def classify(record: Record, schema: str, other: str | None, reader: Reading) -> str:
    """The class of the verdicts' disagreement (``agree`` when there is none)."""
    accepted = schema == "accept"
    if other is not None and (other == "accept") != accepted:
        return EXPRESSIBLE  # python-jsonschema and ajv read the schema differently
    if reader.crash is not None:
        return "reader crash"
    if reader.accepted == accepted:
        return AGREE
    if accepted:
        return _left_to_reader(record, reader)
    # The schema refused what the reader accepted.
    return EXPRESSIBLE


def _left_to_reader(record: Record, reader: Reading) -> str:  # noqa: PLR0911
    code, path = reader.code, reader.path
    if code is ReasonCode.BAD_DIGEST or path.startswith("$.digests"):
        return "digests"
    if code in {ReasonCode.BAD_SIGNATURE, ReasonCode.UNSIGNED_HOP} or path.startswith(
        "$.signatures"
    ):
        return "signatures"
    if code in _BINDING:
        return BINDING
    if code is ReasonCode.BAD_TRACEPARENT:
        return "traceparent"
    if path.startswith("$.headers") or code in {
        ReasonCode.DUPLICATE_HEADER,
        ReasonCode.MISSING_HEADER,
    }:
        return "headers"
    if code is ReasonCode.NOT_CANONICAL:
        return "canonical form"
    if code is ReasonCode.BAD_JSON and ("duplicate" in reader.detail or "twice" in reader.detail):
        return "duplicate members"
    twin = canonical_twin(record)
    if twin is not None and read(twin).accepted:
        return "canonical form"
    return EXPRESSIBLE


def judge(
    mutation: Mutation, validators: dict[str, Draft202012Validator], ajv: dict[str, str] | None
) -> Judgement:
    record = mutation.record
    python = python_verdict(record, validators)
    other = ajv.get(mutation.name) if ajv is not None else None
    reader = read(record)
    return Judgement(mutation, python, other, reader, classify(record, python, other, reader))


def validators_for(schema_set: dict[str, dict[str, Any]]) -> dict[str, Draft202012Validator]:
    for schema in schema_set.values():
        Draft202012Validator.check_schema(schema)
    return {kind: Draft202012Validator(schema) for kind, schema in schema_set.items()}


def summary(judgements: list[Judgement]) -> str:
    """Counts by class (designed, random, all), as a small table."""
    rows: list[tuple[str, str]] = [(AGREE, AGREE), (EXPRESSIBLE, EXPRESSIBLE)]
    rows += [(f"left to the reader: {name}", name) for name in LEFT_TO_READER]
    rows += [(f"must not happen: {name}", name) for name in PENDING]

    def counts(found: list[Judgement]) -> str:
        designed = sum(j.mutation.origin == "designed" for j in found)
        return f"{designed:>8} {len(found) - designed:>7} {len(found):>5}"

    ajv = [j for j in judgements if j.ajv is not None]
    same = sum((j.ajv == "accept") == (j.python == "accept") for j in ajv)
    agreement = f"{same} of {len(ajv)}" if ajv else "- (ajv not run)"
    lines = [
        f"{'class':<76} {'designed':>8} {'random':>7} {'all':>5}",
        *(
            f"{label:<76} {counts([j for j in judgements if j.verdict_class == key])}"
            for label, key in rows
        ),
        f"{'mutations':<76} {counts(judgements)}",
        (
            f"schema accepts {sum(j.python == 'accept' for j in judgements)}, reader accepts "
            f"{sum(j.reader.accepted for j in judgements)}; ajv and python-jsonschema agree "
            f"on {agreement}"
        ),
    ]
    return "\n".join(lines)


def run() -> list[Judgement]:
    """The whole campaign (for the script and the summary)."""
    from mutations import campaign  # noqa: PLC0415

    schema_set = schemas()
    mutations = list(campaign())
    validators = validators_for(schema_set)
    ajv = ajv_verdicts(mutations, schema_set)
    return [judge(mutation, validators, ajv) for mutation in mutations]


if __name__ == "__main__":
    judgements = run()
    for judgement in judgements:
        if judgement.verdict_class != AGREE:
            print(judgement.describe())  # noqa: T201
    print(summary(judgements))  # noqa: T201
