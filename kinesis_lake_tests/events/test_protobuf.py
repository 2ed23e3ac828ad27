"""Protobuf: tables declared from a .proto message, ``format: protobuf`` streams and the
registry's PROTOBUF data format, through the real declaration loader and parser. Records
are built by the protobuf library from protoc's own descriptors (``protobuf_records.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.declaration_file import (
    DeclarationError,
    declaration_from_dict,
    load_declaration,
)
from kinesis_lake.events.parse import route_events
from kinesis_lake_tests.events.protobuf_records import ORDER_PROTO, message_classes, registry_body
from kinesis_lake_tests.events.raw import NOW, event_fields, raw_table
from kinesis_lake_tests.events.registry import EVENT_SCHEMA, ZLIB, Registry, framed

LINE = [
    {"name": "sku", "type": "string", "required": True},
    {"name": "price", "type": "double", "required": True},
]
LISTED = [
    {"name": "id", "type": "string", "required": True},
    {"name": "at", "type": "timestamp"},
    {"name": "status", "type": "string", "required": True},
    {
        "name": "lines",
        "type": "list",
        "required": True,
        "items": {"type": "struct", "required": True, "fields": LINE},
    },
    {
        "name": "counts",
        "type": "map",
        "required": True,
        "values": {"type": "long", "required": True},
    },
    {"name": "note", "type": "string"},
    {"name": "qty", "type": "long", "required": True},
    {"name": "discount", "type": "double"},
    {"name": "card", "type": "string"},
    {"name": "voucher", "type": "string"},
    {
        "name": "ship_to",
        "type": "struct",
        "fields": [{"name": "city", "type": "string", "required": True}],
    },
]
AT = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)
CLASSES = message_classes(ORDER_PROTO, "order.proto")


def _order(order_id: str, **changes: Any) -> Any:
    order = CLASSES["shop.Order"](id=order_id, status=1, qty=3, card="visa")
    order.at.FromDatetime(AT)
    order.lines.add(sku="a", price=2.5)
    order.counts["x"] = 7
    for name, value in changes.items():
        setattr(order, name, value)
    return order


def _lake_file(tmp_path: Path, text: str, stream: str = "") -> Path:
    (tmp_path / "order.proto").write_text(ORDER_PROTO)
    lake = tmp_path / "lake.yaml"
    lake.write_text(stream + text)
    return lake


TABLE = "tables:\n  - name: orders\n    schema_file: order.proto\n    dedup: id\n"


def test_a_proto_message_declares_the_fields_a_listed_table_would_have(tmp_path):
    (table,) = load_declaration(_lake_file(tmp_path, TABLE)).tables
    assert table.schema.fields == event_fields(LISTED)
    assert table.origin is not None and table.origin.data_format == "PROTOBUF"


REFUSED = {
    "bytes": (
        "message M {\n  string id = 1;\n  bytes blob = 2;\n}\n",
        "line 4: field 'blob': protobuf bytes have no column type",
        "send the value as a string",
    ),
    "recursive": (
        "message M {\n  string id = 1;\n  repeated M children = 2;\n}\n",
        "line 4: field 'children[]': message M contains itself",
        "cut the recursion",
    ),
    "duration": (
        'import "google/protobuf/duration.proto";\nmessage M {\n'
        "  google.protobuf.Duration took = 1;\n}\n",
        "line 4: field 'took': google.protobuf.Duration has no column type",
        "use a message of your own",
    ),
    "syntax": (
        "message M {\n  strin id = 1;\n}\n",
        'the .proto schema does not compile: order.proto:3:3: "strin" is not defined.',
        "",
    ),
}


@pytest.mark.parametrize(("proto", "what", "fix"), REFUSED.values(), ids=REFUSED.keys())
def test_what_a_proto_cannot_map_stops_the_load_naming_file_line_path_and_fix(
    tmp_path, proto, what, fix
):
    lake = _lake_file(tmp_path, TABLE)
    (tmp_path / "order.proto").write_text('syntax = "proto3";\n' + proto)

    with pytest.raises(DeclarationError) as raised:
        load_declaration(lake)

    message = str(raised.value)
    assert message.startswith(f"{lake}:2: table 'orders': schema_file 'order.proto'"), message
    assert what in message and fix in message, message


STREAM = "streams:\n  - {name: events, format: protobuf, schema_file: order.proto}\n"


def _route(lake: LakeDeclaration, payloads: list[bytes | None]) -> tuple[list[dict], dict]:
    shipped = LakeDeclaration.from_dict(lake.to_dict())  # as the executors get it
    routed = route_events(raw_table(payloads), shipped, now=NOW)
    reasons = {row["sequence_number"]: row["error"] for row in routed.quarantine.to_pylist()}
    return routed.tables["orders"].to_pylist(), reasons


def test_protobuf_records_come_out_typed_and_the_broken_ones_quarantined(tmp_path):
    lake = load_declaration(_lake_file(tmp_path, TABLE, STREAM))
    full = _order("o1", note="gift")
    full.discount.value = 0.5
    full.ship_to.city = "Oslo"
    bare = CLASSES["shop.Order"](id="o2")  # proto3: a plain message field may be unset
    payloads = [
        full.SerializeToString(),
        _order("o3").SerializeToString(),
        bare.SerializeToString(),
        b"\x0a\x05ab",  # a string cut short
        b"\x0a\x02\xff\xfe",  # a string that is not UTF-8
        b"",
    ]

    rows, reasons = _route(lake, payloads)

    first, second, third = rows
    assert first == {
        **first,
        "id": "o1",
        "at": AT,
        "status": "PAID",
        "lines": [{"sku": "a", "price": 2.5}],
        "counts": [("x", 7)],
        "note": "gift",
        "qty": 3,
        "discount": 0.5,
        "card": "visa",
        "voucher": None,
        "ship_to": {"city": "Oslo"},
    }
    assert (second["note"], second["discount"], second["ship_to"]) == (None, None, None)
    assert (third["id"], third["at"], third["status"], third["qty"]) == ("o2", None, "NEW", 0)
    assert reasons["4"].startswith("protobuf payload does not decode: DecodeError")
    assert reasons["5"].startswith("protobuf payload does not decode: DecodeError")
    assert reasons["6"] == "record payload is empty (0 bytes); expected protobuf data"
    assert len(reasons) == 3


def test_records_of_an_older_version_without_a_new_message_field_land_with_it_null(tmp_path):
    """Proto3 lets every field be absent on the wire: a message field added by a newer
    version of the schema must not quarantine the records written before it."""
    lake = load_declaration(_lake_file(tmp_path, TABLE, STREAM))
    older = message_classes(ORDER_PROTO.replace("  optional Address ship_to = 11;\n", ""))
    payloads = [older["shop.Order"](id="o1", qty=2).SerializeToString()]

    rows, reasons = _route(lake, payloads)

    assert reasons == {}
    assert [(r["id"], r["qty"], r["ship_to"], r["at"]) for r in rows] == [("o1", 2, None, None)]


def test_a_record_without_its_protobuf_event_time_is_quarantined_as_a_json_one_is(tmp_path):
    """The event time is the one message field a record cannot lack: a proto table's
    ``event_time_field`` is a required column, as a JSON table's must be declared."""
    timed = TABLE + "    event_time_field: at\n"
    proto_lake = load_declaration(_lake_file(tmp_path, timed, STREAM))
    at = next(f for f in proto_lake.tables[0].schema.fields if f.name == "at")
    assert at.required
    listed = [
        {"name": "id", "type": "string"},
        {"name": "at", "type": "timestamp", "required": True},
    ]
    json_table = {"name": "orders", "fields": listed, "event_time_field": "at"}
    json_lake = declaration_from_dict({"tables": [json_table]})
    timeless = _order("o2")
    timeless.ClearField("at")

    proto_rows, proto_reasons = _route(
        proto_lake, [_order("o1").SerializeToString(), timeless.SerializeToString()]
    )
    json_rows, json_reasons = _route(
        json_lake, [b'{"id": "o1", "at": "2024-05-01T10:00:00Z"}', b'{"id": "o2"}']
    )

    assert [r["id"] for r in proto_rows] == [r["id"] for r in json_rows] == ["o1"]
    assert proto_reasons == json_reasons == {"2": "missing required field 'at'"}


def test_a_table_names_which_message_of_its_proto_it_is(tmp_path):
    table = "tables:\n  - {name: addresses, schema_file: order.proto, message: Address}\n"
    lake = load_declaration(_lake_file(tmp_path, table))
    (table,) = lake.tables
    assert table.schema.fields == event_fields(
        [{"name": "city", "type": "string", "required": True}]
    )


@pytest.mark.parametrize(
    ("extra", "told"),
    [
        (
            "    message: Nope\n",
            "schema_file 'order.proto': message 'Nope' is not defined in order.proto; "
            "messages: shop.Order, shop.Address, shop.Order.CountsEntry, shop.Order.Line",
        ),
        ("    message: 7\n", "message must be the name of a message of the .proto"),
    ],
)
def test_a_table_naming_a_message_its_proto_lacks_stops_the_load(tmp_path, extra, told):
    lake = _lake_file(tmp_path, TABLE + extra)
    with pytest.raises(DeclarationError) as raised:
        load_declaration(lake)
    assert str(raised.value) == f"{lake}:2: table 'orders': {told}"


@pytest.mark.parametrize(
    "table",
    [
        "tables:\n  - {name: orders, schema_file: x.avsc, message: Order}\n",
        "tables:\n  - {name: orders, fields: [{name: id, type: string}], message: Order}\n",
    ],
)
def test_message_applies_to_a_proto_schema_file_only(tmp_path, table):
    (tmp_path / "x.avsc").write_text(
        json.dumps(
            {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
        )
    )
    lake = _lake_file(tmp_path, table)
    with pytest.raises(DeclarationError) as raised:
        load_declaration(lake)
    assert str(raised.value) == (
        f"{lake}:2: table 'orders': message applies to a .proto schema_file (a registry_schema "
        "takes its own message:)"
    )


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ("{name: s, format: protobuf}", "format protobuf needs the .proto schema"),
        ("{name: s, format: protobuf, schema_file: order.proto, message: Nope}", "'Nope' is not"),
        ("{name: s, format: avro, schema_file: x.avsc, message: Order}", "message applies to"),
    ],
)
def test_a_protobuf_stream_that_cannot_be_used_stops_the_load(tmp_path, stream, message):
    lake = _lake_file(tmp_path, TABLE, f"streams:\n  - {stream}\n")
    with pytest.raises(DeclarationError) as raised:
        load_declaration(lake)
    assert str(raised.value).startswith(f"{lake}:2: streams[0]: stream 's': ")
    assert message in str(raised.value)


def test_a_stream_names_which_message_its_records_are(tmp_path):
    stream = "streams:\n  - {name: events, format: protobuf, schema_file: order.proto, "
    lake = load_declaration(_lake_file(tmp_path, TABLE, stream + "message: shop.Address}\n"))
    address = CLASSES["shop.Address"](city="Oslo").SerializeToString()
    (stream_declared,) = lake.streams
    assert stream_declared.format.message == "shop.Address"
    _, reasons = _route(lake, [address])
    assert reasons["1"] == "missing required field 'id'"


def _registry_lake(registry: Registry, table: dict[str, Any]) -> LakeDeclaration:
    where = {"region": "us-east-1", "endpoint_url": registry.endpoint_url}
    stream = {"name": "events", "format": "glue-schema-registry", "registry": where}
    return declaration_from_dict({"streams": [stream], "tables": [table]})


def test_registry_protobuf_records_decode_by_their_message_index(registry):
    version = registry.create("orders", ORDER_PROTO, "PROTOBUF")
    lake = _registry_lake(
        registry,
        {"name": "orders", "registry_schema": {"registry": registry.name, "schema": "orders"}},
    )
    assert lake.tables[0].schema.fields == event_fields(LISTED)
    good = registry_body(_order("o1"))
    address = registry_body(CLASSES["shop.Address"](city="Oslo"))
    payloads = [
        framed(version, good),
        framed(version, registry_body(_order("o2")), ZLIB),
        framed(version, address),  # another message of the schema: not an order
        framed(version, b"\x63" + good[1:]),  # index 99: no such message
        framed(version, good[:-2]),
    ]

    rows, reasons = _route(lake, payloads)

    assert [(r["id"], r["at"], r["status"]) for r in rows] == [
        ("o1", AT, "PAID"),
        ("o2", AT, "PAID"),
    ]
    label = f"glue-schema-registry: schema version {version} (version 1 of "
    assert reasons["4"].startswith(label) and reasons["5"].startswith(label)
    assert reasons["3"] == "missing required field 'id'"
    assert reasons["4"].endswith(
        ": Protobuf payload does not decode: ValueError: message index 99 is past the "
        "schema's 4 messages"
    )
    assert ": Protobuf payload does not decode: DecodeError" in reasons["5"]


def test_a_message_field_a_newer_registry_version_adds_leaves_older_records_landing(registry):
    older = ORDER_PROTO.replace("  optional Address ship_to = 11;\n", "")
    first = registry.create("orders", older.replace("optional Address", "Address"), "PROTOBUF")
    registry.register("orders", ORDER_PROTO.replace("optional Address", "Address"))
    lake = _registry_lake(
        registry,
        {
            "name": "orders",
            "registry_schema": {"registry": registry.name, "schema": "orders"},
            "event_time_field": "at",
        },
    )
    written = message_classes(older)["shop.Order"](id="o1")
    written.at.FromDatetime(AT)

    rows, reasons = _route(lake, [framed(first, registry_body(written))])

    assert reasons == {}
    assert [(r["id"], r["at"], r["ship_to"]) for r in rows] == [("o1", AT, None)]


def test_a_registered_proto_that_does_not_compile_quarantines_its_records(registry):
    broken = registry.create(
        "orders", 'syntax = "proto3";\nmessage M { strin id = 1; }', "PROTOBUF"
    )
    lake = _registry_lake(
        registry, {"name": "orders", "fields": [{"name": "id", "type": "string"}]}
    )
    _, reasons = _route(lake, [framed(broken, b"\x00")])
    assert reasons["1"].startswith(f"glue-schema-registry: schema version {broken}")
    assert (
        ": Protobuf schema does not parse: ProtoSchemaError: the .proto schema does not "
        'compile: schema.proto:2:13: "strin" is not defined.' in reasons["1"]
    )


def test_registry_json_records_are_validated_against_their_json_schema(registry):
    version = registry.create("events", EVENT_SCHEMA, "JSON")
    lake = _registry_lake(
        registry,
        {"name": "orders", "registry_schema": {"registry": registry.name, "schema": "events"}},
    )
    payloads = [
        framed(version, json.dumps({"id": "e1", "n": 3, "kind": "a"}).encode()),
        framed(version, json.dumps({"id": "e2", "n": -1}).encode()),
        framed(version, json.dumps({"id": "e3", "kind": "c"}).encode(), ZLIB),
        framed(version, json.dumps({"n": 1}).encode()),
        framed(version, json.dumps({"id": "e"}).encode()),
    ]

    rows, reasons = _route(lake, payloads)

    assert [(r["id"], r["n"], r["kind"]) for r in rows] == [("e1", 3, "a")]
    label = f"glue-schema-registry: schema version {version} (version 1 of "
    assert all(reason.startswith(label) for reason in reasons.values())
    suffix = ": JSON payload does not validate against its JSON Schema: "
    assert reasons["2"].endswith(suffix + "at n: -1 is less than the minimum of 0")
    assert reasons["3"].endswith(suffix + "at kind: 'c' is not one of ['a', 'b']")
    assert reasons["4"].endswith(suffix + "'id' is a required property")
    assert reasons["5"].endswith(suffix + "at id: 'e' is too short")


def test_a_registered_json_schema_that_is_invalid_quarantines_its_records(registry):
    broken = registry.create("events", {"type": "object", "minProperties": "two"}, "JSON")
    lake = _registry_lake(
        registry, {"name": "orders", "fields": [{"name": "id", "type": "string"}]}
    )
    _, reasons = _route(lake, [framed(broken, b'{"id": "x"}')])
    assert reasons["1"].startswith(f"glue-schema-registry: schema version {broken}")
    assert ": JSON Schema does not parse: " in reasons["1"]


def test_produce_refuses_a_protobuf_stream_naming_what_it_sends(tmp_path):
    """The demo's producer writes JSON and Avro only: a Protobuf stream must not get Avro."""
    from kinesis_lake.errors import ConfigurationError
    from kinesis_lake.pipeline.encoded_events import demo_payloads

    (stream,) = load_declaration(_lake_file(tmp_path, TABLE, STREAM)).streams
    with pytest.raises(ConfigurationError, match="stream 'events' is declared protobuf; produce"):
        demo_payloads(stream.format, stream.name, 3)
