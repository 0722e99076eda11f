"""The schema-2 test vectors: the reader, the exported JSON Schema and a JavaScript verifier agree.

``tests/vectors/v2`` holds records (valid, and broken in one way each) with the verdict every
implementation must reach: the reason code and JSON path of a refusal (``SPEC.md`` section 5),
and whether the exported JSON Schema accepts the envelope document.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped] # no stubs in dev deps

from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.schemas import EnvelopeCodec, Keyring, envelope_schema, topic_schema

VECTORS = Path(__file__).parents[1] / "vectors"
FILES = sorted((VECTORS / "v2").glob("*.json"))


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return vector


def verdict(vector: dict[str, Any]) -> dict[str, Any]:
    keys = {name: bytes.fromhex(key) for name, key in vector["keys"].items()}
    public = {
        name: [bytes.fromhex(key) for key in hexes] for name, hexes in vector["public_keys"].items()
    }
    keyring = Keyring(keys, verifying=public) if keys or public else None
    codec = EnvelopeCodec(GENERATOR.registry(), keyring=keyring)
    headers = [(name, raw.encode()) for name, raw in vector["headers"]]
    try:
        codec.decode(vector["topic"], vector["value"].encode(), headers)
    except DecodeError as exc:
        return {"reason": exc.code.value, "path": exc.path}
    return {"reason": None}


def test_the_vectors_are_what_the_generator_writes() -> None:
    written = {vector["name"]: vector for vector in GENERATOR.vectors()}

    assert sorted(written) == sorted(path.stem for path in FILES)
    for path in FILES:
        assert load(path) == written[path.stem], path.name
    reasons = {load(path)["expect"]["reason"] for path in FILES}
    assert len(FILES) >= 30
    assert None in reasons
    assert len(reasons) >= 14


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_the_reader_reaches_each_vectors_verdict(path: Path) -> None:
    vector = load(path)

    assert verdict(vector) == vector["expect"]


def _no_constants(name: str) -> Any:
    raise ValueError(name)


def _document(vector: dict[str, Any]) -> Any:
    """The envelope document, or None where it is not JSON (NaN included, as in ECMAScript)."""
    text = dict(vector["headers"]).get("hopchain-envelope", vector["value"])
    try:
        return json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return None


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_the_exported_json_schema_agrees_with_the_reader(path: Path) -> None:
    vector = load(path)
    registry = GENERATOR.registry()
    if vector["mode"] == "body":
        schema = topic_schema(registry, vector["topic"])
    else:
        schema = envelope_schema()
    Draft202012Validator.check_schema(schema)
    document = _document(vector)

    if vector["schema"] == "unparsed":
        assert document is None
        return
    errors = [error.message for error in Draft202012Validator(schema).iter_errors(document)]
    assert (not errors) == (vector["schema"] == "accept"), errors


def _node() -> str | None:
    return shutil.which("node")


def test_the_javascript_verifier_knows_every_reason_code_and_no_other() -> None:
    # verify.mjs is written from SPEC.md, so it lists the closed vocabulary itself; a code it
    # lacks would refuse a validation error naming it as unknown_vocabulary.
    source = (VECTORS / "verify.mjs").read_text()
    listed = re.search(r"const REASON_CODES = words\(\[(.*?)\]\);", source, re.DOTALL)
    assert listed is not None
    assert set(re.findall(r'"([a-z0-9_]+)"', listed.group(1))) == {
        code.value for code in ReasonCode
    }


def test_an_independent_javascript_verifier_reaches_every_verdict() -> None:
    node = _node()
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed; .ci/run installs it")
        pytest.skip("node is not installed")
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [node, str(VECTORS / "verify.mjs"), str(VECTORS / "v2")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(FILES)} of {len(FILES)} vectors agree" in result.stdout


AJV = Path(__file__).parents[2] / ".cache" / "node" / "node_modules"


def test_ajv_applies_the_exported_schemas_as_the_vectors_say(tmp_path: Path) -> None:
    node = _node()
    if node is None or not (AJV / "ajv").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"node or ajv missing ({AJV}); .ci/run installs both")
        pytest.skip("node or ajv is not installed (npm install --prefix .cache/node ajv)")
    registry = GENERATOR.registry()
    headers_schema, body_schema = tmp_path / "headers.json", tmp_path / "body.json"
    headers_schema.write_text(json.dumps(envelope_schema()), encoding="utf-8")
    body_schema.write_text(
        json.dumps(topic_schema(registry, GENERATOR.BODY_TOPIC)), encoding="utf-8"
    )
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [
            node,
            str(VECTORS / "ajv_check.mjs"),
            str(AJV),
            str(headers_schema),
            str(body_schema),
            str(VECTORS / "v2"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(FILES)} of {len(FILES)} vectors agree with ajv" in result.stdout
