"""The whole failure path under FastStream's TestKafkaBroker, on both broker families.

No Kafka here: ``BrokerWriter`` parks dead letters and reroutes through the in-memory broker,
so a subscriber on the dead-letter topic receives them. The same scenarios run against the
real broker in test_faststream.py and test_stage.py.
"""

from __future__ import annotations

from types import ModuleType
from typing import Annotated, Any, cast

import faststream.confluent
import faststream.kafka
import pytest
from faststream import AckPolicy, Context, StreamMessage
from pydantic import BaseModel, field_validator

from hopchain import (
    ConfigurationError,
    ContractRegistry,
    Degrade,
    Hopchain,
    HopchainConfig,
    HopchainMiddleware,
    Pipeline,
    RejectedInput,
    Reroute,
    TopicContract,
    current_hop,
    origin,
)
from hopchain.middleware.engine import OutgoingRecord
from hopchain.middleware.faststream import BrokerWriter
from hopchain.schemas import ENVELOPE_HEADER, Decision, Envelope, ErrorType
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.schemas.text_v2 import load_envelope


class Order(BaseModel):
    order_id: str
    amount_cents: int


class Invoice(BaseModel):
    order_id: str
    total_cents: int


CONTRACTS = ContractRegistry(
    [
        TopicContract(topic="orders", model=Order, owner="checkout-team"),
        TopicContract(topic="invoices", model=Invoice, owner="billing-team"),
        TopicContract(topic="review", model=Order, owner="billing-team"),
    ]
)


Message = Annotated[StreamMessage[Any], Context("message")]
"""The message a subscriber received, on either broker family."""


@pytest.fixture(params=["kafka", "confluent"])
def family(request: pytest.FixtureRequest) -> ModuleType:
    """FastStream's broker family: ``faststream.kafka`` (aiokafka) or ``faststream.confluent``."""
    return {"kafka": faststream.kafka, "confluent": faststream.confluent}[request.param]


class Seen:
    """What the in-memory subscribers received: bodies and headers, per topic."""

    def __init__(self) -> None:
        self.records: dict[str, list[tuple[bytes, dict[str, str]]]] = {}

    def recorder(self, topic: str) -> Any:
        async def record(message: Message) -> None:
            self.records.setdefault(topic, []).append((message.body, dict(message.headers)))

        return record


def app(
    seen: Seen, family: ModuleType, *, router: bool = False
) -> tuple[Any, HopchainMiddleware, Any]:
    """An invoicing service: fails on order 'boom', rejects 'bad', degrades or reroutes."""
    hopchain = Hopchain(CONTRACTS, component="invoicer", config=HopchainConfig())
    broker = family.KafkaBroker(ack_policy=AckPolicy.ACK)
    middleware = HopchainMiddleware(hopchain, writer=BrokerWriter(broker), group="invoicer")
    target = (
        family.KafkaRouter(middlewares=[middleware], ack_policy=AckPolicy.ACK) if router else broker
    )
    if not router:
        broker.add_middleware(middleware)
    pipeline = Pipeline("billing")
    price = pipeline.stage(
        "price",
        input="orders",
        output="invoices",
        owner="billing-team",
        side_effects_free=True,
        on_exhausted=Degrade(Invoice(order_id="?", total_cents=0), reason="priced later"),
        on_error={ErrorType.CONFLICT: Reroute(topic="review")},
    )

    async def invoice(order: Order) -> Invoice:
        assert current_hop() is not None
        if order.order_id == "boom":
            raise RuntimeError("the invoice store is broken")
        if order.order_id == "bad":
            raise RejectedInput("no such customer")
        if order.order_id == "stale":
            from hopchain import Conflict  # noqa: PLC0415

            raise Conflict("the price list moved on")
        return Invoice(order_id=order.order_id, total_cents=order.amount_cents)

    # Declared by calls, not decorators: the broker's class depends on the family.
    target.subscriber("orders", group_id="invoicer")(target.publisher("invoices")(price(invoice)))
    for topic in ("invoices", "orders.dlq", "review"):
        target.subscriber(topic, group_id=f"observer-{topic}")(seen.recorder(topic))
    # The checkout service's side: publishing through the middleware mints origin hops.
    checkout = target.publisher("orders")
    if router:
        broker.include_router(target)
    middleware.check(broker)
    return broker, middleware, checkout


async def send(checkout: Any, order_id: str) -> None:
    with origin(run_id="unit", work_item_id=order_id):
        await checkout.publish(Order(order_id=order_id, amount_cents=1250))


def chain_of(headers: dict[str, str], name: str = ENVELOPE_HEADER) -> Envelope:
    return load_envelope(headers[name])


@pytest.mark.parametrize("router", [False, True], ids=["broker", "router"])
async def test_valid_records_are_handled_and_forwarded_with_one_new_hop(
    router: bool, family: ModuleType
) -> None:
    seen = Seen()
    broker, _, checkout = app(seen, family, router=router)
    async with family.TestKafkaBroker(broker):
        await send(checkout, "o-1")
    [(body, headers)] = seen.records["invoices"]
    assert body == b'{"order_id":"o-1","total_cents":1250}'
    assert [h.decision for h in chain_of(headers).chain] == [
        Decision.ORIGINATED,
        Decision.FORWARDED,
    ]
    assert "orders.dlq" not in seen.records


@pytest.mark.parametrize("router", [False, True], ids=["broker", "router"])
async def test_a_bare_record_is_parked_byte_for_byte_and_never_handled(
    router: bool, family: ModuleType
) -> None:
    seen = Seen()
    broker, middleware, _ = app(seen, family, router=router)
    async with family.TestKafkaBroker(broker) as test_broker:
        bare = OutgoingRecord("orders", b'{"order_id": "o-2"}', b"k", [("source", b"legacy")])
        await BrokerWriter(test_broker).write(bare)
    [(body, headers)] = seen.records["orders.dlq"]
    assert body == b'{"order_id": "o-2"}'
    assert headers["source"] == "legacy"
    info = read_dead_letter_headers([(n, v.encode()) for n, v in headers.items()])
    assert (info.reason, info.owner, info.group) == (
        "missing_header",
        "checkout-team",
        "invoicer",
    )
    assert "invoices" not in seen.records
    rejected = middleware.hopchain.metrics.registry.get_sample_value(
        "hopchain_rejected_total",
        {"topic": "orders", "direction": "consume", "reason": "missing_header"},
    )
    assert rejected == 1


async def test_a_handler_failure_is_dead_lettered_with_its_hop(family: ModuleType) -> None:
    seen = Seen()
    broker, _, checkout = app(seen, family)
    async with family.TestKafkaBroker(broker):
        await send(checkout, "boom")
    [(body, headers)] = seen.records["orders.dlq"]
    assert body == b'{"order_id":"boom","amount_cents":1250}'
    parked = chain_of(headers, "hopchain-dlq-envelope")
    assert parked.chain[-1].decision is Decision.DEAD_LETTERED
    assert parked.chain[-1].failure is not None
    assert parked.chain[-1].failure.error_type is ErrorType.INTERNAL
    assert "invoices" not in seen.records


async def test_rejected_input_is_degraded_and_marked(family: ModuleType) -> None:
    seen = Seen()
    broker, _, checkout = app(seen, family)
    async with family.TestKafkaBroker(broker):
        await send(checkout, "bad")
    [(body, headers)] = seen.records["invoices"]
    assert body == b'{"order_id":"?","total_cents":0}'
    assert chain_of(headers).chain[-1].decision is Decision.DEGRADED
    assert headers["hopchain-degraded"]
    assert "orders.dlq" not in seen.records


async def test_a_conflict_is_rerouted_with_a_rerouted_hop(family: ModuleType) -> None:
    seen = Seen()
    broker, _, checkout = app(seen, family)
    async with family.TestKafkaBroker(broker):
        await send(checkout, "stale")
    [(body, headers)] = seen.records["review"]
    assert body == b'{"order_id":"stale","amount_cents":1250}'
    assert chain_of(headers).chain[-1].decision is Decision.REROUTED
    assert "invoices" not in seen.records
    assert "orders.dlq" not in seen.records


class Picky(BaseModel):
    """A contract whose validator has a bug: it raises KeyError on an unexpected code."""

    code: str

    @field_validator("code")
    @classmethod
    def known(cls, value: str) -> str:
        return {"a": value, "b": value}[value[0]]


async def test_a_contract_validator_that_raises_parks_the_record_not_loses_it(
    family: ModuleType,
) -> None:
    contracts = ContractRegistry(
        [TopicContract(topic="codes", model=Picky, owner="codes-team", adopt_bare=True)]
    )
    hopchain = Hopchain(contracts, component="coder", config=HopchainConfig())
    broker = family.KafkaBroker(ack_policy=AckPolicy.ACK)
    middleware = HopchainMiddleware(hopchain, writer=BrokerWriter(broker), group="coder")
    broker.add_middleware(middleware)
    handled: list[str] = []
    seen = Seen()

    async def handle(picked: Picky) -> None:
        handled.append(picked.code)

    broker.subscriber("codes", group_id="coder")(handle)

    broker.subscriber("codes.dlq", group_id="observer")(seen.recorder("codes.dlq"))
    middleware.check(broker)
    async with family.TestKafkaBroker(broker) as test_broker:
        for code in ("a1", "zz", "b3"):
            record = OutgoingRecord("codes", f'{{"code": "{code}"}}'.encode(), None, [])
            await BrokerWriter(test_broker).write(record)
    assert handled == ["a1", "b3"]
    [(body, headers)] = seen.records["codes.dlq"]
    assert body == b'{"code": "zz"}'
    info = read_dead_letter_headers([(n, v.encode()) for n, v in headers.items()])
    assert info.reason in {"reader_error", "contract_error"}
    assert info.error_type == ErrorType.INTERNAL


def test_check_refuses_a_broker_of_another_client(family: ModuleType) -> None:
    middleware = HopchainMiddleware(
        Hopchain(CONTRACTS, component="invoicer", config=HopchainConfig()),
        writer=BrokerWriter(family.KafkaBroker()),
    )
    with pytest.raises(ConfigurationError, match=r"faststream\.kafka \(aiokafka\)"):
        middleware.check(cast("Any", object()))
