"""The code of the README and of the guides runs as written, against a real broker, so it
cannot rot. The README's quick start is run whole, from a wheel, by test_quickstart.py; the
FastStream guide's service, its metrics wiring and the failure-policy guide's stage run here."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel

import hopchain
from hopchain import Hopchain, HopchainMiddleware, Stage, origin
from hopchain.schemas import ENVELOPE_HEADER, TopicContract, WireMode
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import create_topics

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FASTSTREAM_GUIDE = ROOT / "docs" / "guides" / "faststream.md"
POLICY_GUIDE = ROOT / "docs" / "guides" / "failure-policy.md"
API_PAGE = ROOT / "docs" / "reference" / "api.md"


def _blocks_of(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def _python_blocks() -> list[str]:
    """The FastStream service, its metrics wiring, and the declared stage, in that order."""
    service, metrics = _blocks_of(FASTSTREAM_GUIDE)
    (stage,) = _blocks_of(POLICY_GUIDE)
    return [service, metrics, stage]


async def _first_record(bootstrap: str, topic: str) -> Any:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        return await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()


def test_the_readme_and_the_guides_have_the_snippets_this_test_runs() -> None:
    quick_start, registry = _blocks_of(README)
    assert "AvroFormat(" in registry
    assert quick_start.startswith("# shop.py\n")
    blocks = _python_blocks()
    assert "Hopchain" in blocks[0]
    assert "middleware.app(broker)" in blocks[0]
    assert "listener=middleware.listener()" in blocks[0]
    assert "middleware.app(broker)" in blocks[1]
    assert "pipeline.stage(" in blocks[2]


def test_every_example_imports_only_what_the_api_page_names() -> None:
    # A reader copies imports as they are: from hopchain, only its __all__; from a submodule,
    # only one the API page names.
    documented = set(re.findall(r"`(hopchain(?:\.\w+)+)`", API_PAGE.read_text(encoding="utf-8")))
    taken = []
    for page in (README, *sorted((ROOT / "docs").rglob("*.md"))):
        for block in _blocks_of(page):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hopchain"):
                    taken += [(page.name, node.module, alias.name) for alias in node.names]
    assert ("README.md", "hopchain", "HopchainMiddleware") in taken
    offenders = [
        use
        for use in taken
        if (use[1] == "hopchain" and use[2] not in hopchain.__all__)
        or (use[1] != "hopchain" and use[1] not in documented)
    ]
    assert offenders == []


def test_the_whole_programs_among_the_examples_pass_mypy_strict(tmp_path: Path) -> None:
    # The README's quick start, the quick start page's and the FastStream guide's service are
    # whole modules; the other snippets are fragments of them.
    programs = {
        "readme_shop.py": _blocks_of(README)[0],
        "quickstart_shop.py": _blocks_of(ROOT / "docs" / "quickstart.md")[0],
        "faststream_service.py": _python_blocks()[0],
    }
    for name, source in programs.items():
        (tmp_path / name).write_text(source, encoding="utf-8")
    result = subprocess.run(  # noqa: S603 - this interpreter's mypy, on our own docs
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            *sorted(str(tmp_path / name) for name in programs),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout
    assert "no issues found in 3 source files" in result.stdout


def test_the_quick_start_service_is_wired_as_the_readme_says() -> None:
    quick_start, _ = _blocks_of(README)
    namespace: dict[str, Any] = {"__name__": "shop"}
    exec(compile(quick_start, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    from faststream import AckPolicy, FastStream  # noqa: PLC0415

    assert isinstance(namespace["app"], FastStream)
    assert namespace["middleware"].ack_policy is AckPolicy.MANUAL
    (subscriber,) = namespace["broker"].subscribers
    assert [topic.name for topic in subscriber.topics] == ["orders"]
    assert namespace["contracts"].get("orders").owner == "shop-team"


def test_the_registry_snippet_builds_an_avro_contract(tmp_path: Path) -> None:
    _, registry = _blocks_of(README)
    (tmp_path / "order.avsc").write_text(
        '{"type": "record", "name": "Order", "fields": ['
        '{"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "long"}]}'
    )

    class Order(BaseModel):
        order_id: str
        amount_cents: int

    namespace: dict[str, Any] = {"TopicContract": TopicContract, "Order": Order}
    with contextlib.chdir(tmp_path):
        exec(compile(registry, "README.md", "exec"), namespace)  # noqa: S102 - our own README

    orders = namespace["orders"]
    assert orders.payload_format.kind == "avro"
    assert orders.mode is WireMode.HEADERS  # registry payloads travel in headers mode
    assert orders.binary_payload


@pytest.mark.kafka
async def test_the_wrap_snippet_validates_appends_and_parks(kafka_bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    orders, invoices = f"orders-{suffix}", f"invoices-{suffix}"
    source = _python_blocks()[0]
    source = source.replace('"127.0.0.1:9092"', repr(kafka_bootstrap))
    source = source.replace('"orders"', repr(orders)).replace('"invoices"', repr(invoices))
    await create_topics(kafka_bootstrap, orders, invoices, f"{orders}.dlq")
    namespace: dict[str, Any] = {"__name__": "readme_snippet"}
    exec(compile(source, str(FASTSTREAM_GUIDE), "exec"), namespace)  # noqa: S102 - our own docs

    app, middleware = namespace["app"], namespace["middleware"]
    feeder_runtime = Hopchain(namespace["contracts"], component="checkout")
    from faststream.kafka import KafkaBroker  # noqa: PLC0415

    feeder = KafkaBroker(kafka_bootstrap, middlewares=[HopchainMiddleware(feeder_runtime)])
    await app.start()
    # Copied as it is, the snippet commits in batches, hopchain's way.
    assert middleware.owns_commits
    await feeder.start()
    raw = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await raw.start()
    try:
        with origin(run_id="readme", work_item_id="order-1"):
            await feeder.publish(namespace["Order"](order_id="o-1", amount_cents=1250), orders)
        await raw.send_and_wait(orders, b'{"order_id": "o-2"}')  # no envelope: parked
        invoice = await _first_record(kafka_bootstrap, invoices)
        parked = await _first_record(kafka_bootstrap, f"{orders}.dlq")
    finally:
        await raw.stop()
        await feeder.stop()
        await app.stop()

    assert invoice.value == b'{"order_id":"o-1","total_cents":1250}'
    envelope = load_envelope(dict(invoice.headers)[ENVELOPE_HEADER])
    assert [(h.component, h.decision.value) for h in envelope.chain] == [
        ("checkout", "originated"),
        ("invoicer", "forwarded"),
    ]
    assert parked.value == b'{"order_id": "o-2"}'
    assert read_dead_letter_headers(list(parked.headers)).owner == "checkout-team"


def test_the_policy_snippet_declares_a_stage() -> None:
    first, _, second = _python_blocks()
    namespace: dict[str, Any] = {"__name__": "readme_snippet"}
    exec(compile(first + "\n" + second, str(POLICY_GUIDE), "exec"), namespace)  # noqa: S102
    stage = namespace["price"]
    assert isinstance(stage, Stage)
    assert (stage.contract_retries, stage.owner) == (1, "billing-team")


def test_the_metrics_snippet_exposes_the_metrics_and_prepares_dead_letter_topics() -> None:
    first, rollout, _ = _python_blocks()
    namespace: dict[str, Any] = {"__name__": "readme_snippet"}
    exec(compile(first + "\n" + rollout, str(FASTSTREAM_GUIDE), "exec"), namespace)  # noqa: S102
    from faststream import AckPolicy, FastStream  # noqa: PLC0415

    app = namespace["app"]
    assert isinstance(app, FastStream)
    assert namespace["middleware"].ack_policy is AckPolicy.MANUAL
    assert namespace["hopchain"].metrics.registry is namespace["registry"]
    assert list(namespace["broker"].middlewares) == [namespace["middleware"]]


def test_the_first_snippet_needs_three_hopchain_lines_beyond_imports_and_contracts() -> None:
    first = _python_blocks()[0]
    after_contracts = first.split("\n)\n", 1)[1]
    service = after_contracts.split("\n\n\n@", 1)[0]
    hopchain_lines = [
        line for line in service.splitlines() if re.search(r"\b(Hopchain|middleware)\b", line)
    ]
    assert len(hopchain_lines) == 3, hopchain_lines
