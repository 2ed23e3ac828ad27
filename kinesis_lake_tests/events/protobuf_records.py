"""Protobuf records built here with the protobuf library and protoc (grpc_tools, run in this
process, not the project's code), and the Glue Schema Registry's Protobuf body as its
serializer writes it: the message's index among all the schema's messages (nested too,
level by level, sorted by full name) as an unsigned varint, then the message."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]
from grpc_tools import protoc

ORDER_PROTO = """\
syntax = "proto3";
package shop;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  Status status = 3;
  repeated Line lines = 4;
  map<string, int64> counts = 5;
  optional string note = 6;
  uint32 qty = 7;
  google.protobuf.DoubleValue discount = 8;
  oneof paid_by {
    string card = 9;
    string voucher = 10;
  }
  optional Address ship_to = 11;

  message Line {
    string sku = 1;
    double price = 2;
  }
}

message Address {
  string city = 1;
}

enum Status {
  NEW = 0;
  PAID = 1;
}
"""
"""An order of every kind of field a table maps: scalars, Timestamp, an enum, a repeated
message, a map, a wrapper, a oneof, an ``optional`` scalar and message."""


_EVENT_PROTO = """\
syntax = "proto3";
package p;
{imports}message Event {{
  string id = 1;
  optional int64 n = 2;
  repeated string tags = 3;
  Kind kind = 4;
  map<string, int32> counts = 5;
{more}}}
enum Kind {{
  A = 0;
  B = 1;
}}
"""
EVENT_PROTO = _EVENT_PROTO.format(imports="", more="")
"""An event of a scalar, an ``optional``, a repeated, an enum and a map field: what the
Protobuf property tests send."""
TIMED_EVENT_PROTO = _EVENT_PROTO.format(
    imports='import "google/protobuf/timestamp.proto";\n',
    more="  google.protobuf.Timestamp at = 6;\n",
)
"""The same event with a Timestamp ``at``: the fuzz target's, whose table maps it."""


def message_classes(text: str, file_name: str = "test.proto") -> dict[str, Any]:
    """Every message class of the .proto ``text``, by short and by full name."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / file_name).write_text(text)
        out = Path(folder) / "set.desc"
        include = str(Path(protoc.__file__).parent / "_proto")
        argv = ["protoc", f"-I{folder}", f"-I{include}", "--include_imports"]
        assert protoc.main([*argv, f"--descriptor_set_out={out}", file_name]) == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    classes: dict[str, Any] = {}
    for message in _every_message(pool.FindFileByName(file_name)):
        cls = message_factory.GetMessageClass(message)
        classes[message.full_name] = classes[message.name] = cls
    return classes


def registry_body(message: Any) -> bytes:
    """``message`` as the registry's Protobuf serializer writes it after the header."""
    ordered = sorted(m.full_name for m in _every_message(message.DESCRIPTOR.file))
    index = ordered.index(message.DESCRIPTOR.full_name)
    return _VarintBytes(index) + message.SerializeToString()


def _every_message(file: Any) -> list[Any]:
    found, queue = [], list(file.message_types_by_name.values())
    while queue:
        message = queue.pop(0)
        found.append(message)
        queue.extend(message.nested_types)
    return found
