"""Protobuf message classes of a shop, built at run time (no protoc): what ``orders_pb2`` would
hold. Imports nothing of hopchain, so a foreign producer's script uses it too.

``orders.proto`` (package ``shop``) has ``Order`` (with a nested ``Line`` and an enum
``Channel``) and ``Refund``; ``orders_v2.proto`` is the same file with a field added to
``Order``, as a producer that upgraded first writes it.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_FIELD = descriptor_pb2.FieldDescriptorProto


def _field(
    message: Any, name: str, number: int, kind: int, of: str = "", *, repeated: bool = False
) -> None:
    label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
    added = message.field.add(name=name, number=number, type=kind, label=label)
    if of:
        added.type_name = of


def orders_file(*, version: int = 1) -> descriptor_pb2.FileDescriptorProto:
    """``orders.proto``; version 2 adds ``string note = 5`` to ``Order``."""
    file = descriptor_pb2.FileDescriptorProto(
        name="orders.proto" if version == 1 else "orders_v2.proto",
        package="shop",
        syntax="proto3",
    )
    order = file.message_type.add(name="Order")
    _field(order, "order_id", 1, _FIELD.TYPE_STRING)
    _field(order, "amount_cents", 2, _FIELD.TYPE_INT64)
    _field(order, "channel", 3, _FIELD.TYPE_ENUM, ".shop.Order.Channel")
    _field(order, "lines", 4, _FIELD.TYPE_MESSAGE, ".shop.Order.Line", repeated=True)
    if version == 2:
        _field(order, "note", 5, _FIELD.TYPE_STRING)
    line = order.nested_type.add(name="Line")
    _field(line, "sku", 1, _FIELD.TYPE_STRING)
    _field(line, "quantity", 2, _FIELD.TYPE_INT32)
    channel = order.enum_type.add(name="Channel")
    channel.value.add(name="WEB", number=0)
    channel.value.add(name="STORE", number=1)
    refund = file.message_type.add(name="Refund")
    _field(refund, "order_id", 1, _FIELD.TYPE_STRING)
    _field(refund, "amount_cents", 2, _FIELD.TYPE_INT64)
    return file


def message_classes(*, version: int = 1) -> dict[str, type[Message]]:
    """``Order``, ``Order.Line`` and ``Refund`` of one version, each in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(orders_file(version=version))
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
        for name in ("Order", "Order.Line", "Refund")
    }
