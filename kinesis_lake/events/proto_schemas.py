""".proto schemas, compiled by the protoc that grpcio-tools bundles: Python's protobuf cannot
read .proto text, and the Glue Schema Registry keeps Protobuf schemas as .proto text.

A schema is compiled once per process into a serialized ``FileDescriptorSet`` (with its
imports, so the well-known types come along, and with source info, so a field's line can
be told), which is what the declaration ships to the executors and what they build message
classes from. protoc runs in this process (grpcio-tools' compiler module: ``run_main`` is
what its ``protoc`` command runs, ``get_protos`` what its import hook uses and the one way
to get protoc's errors as values rather than on stderr), so reading a schema starts no
process, on the driver or on an executor.
"""

from __future__ import annotations

import base64
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor

from kinesis_lake.errors import KinesisLakeError

_FILE_NAME = "schema.proto"
"""The name a registered definition is compiled under (the registry keeps no file name)."""


class ProtoSchemaError(KinesisLakeError, ValueError):
    """A .proto schema that does not compile, or names no usable message; the message says
    where (protoc's ``line:column``) and what."""


@dataclass(frozen=True)
class ProtoSchema:
    """One compiled .proto file: its descriptor set (base64, JSON-able) and its name in it."""

    descriptor_set: str
    file_name: str

    def to_dict(self) -> dict[str, Any]:
        return {"descriptor_set": self.descriptor_set, "file_name": self.file_name}

    def file(self) -> FileDescriptor:
        return _file(self.descriptor_set, self.file_name)

    def message(self, name: str | None) -> Descriptor:
        """The message ``name`` (full, or short when unambiguous) of the file, or its first
        top-level message when None."""
        file = self.file()
        if name is None:
            if not file.message_types_by_name:
                raise ProtoSchemaError(f"{self.file_name} defines no message")
            return next(iter(file.message_types_by_name.values()))
        found = [m for m in all_messages(file) if name in (m.full_name, m.name)]
        if len(found) != 1:
            defined = ", ".join(m.full_name for m in all_messages(file)) or "none"
            what = "is not defined" if not found else "is ambiguous (give its full name)"
            raise ProtoSchemaError(
                f"message {name!r} {what} in {self.file_name}; messages: {defined}"
            )
        return found[0]

    def field_line(self, message: str, field_index: int) -> int | None:
        """The 1-based line of field ``field_index`` of message ``message`` (a full name),
        when the message is defined in this file."""
        return _lines(self.descriptor_set, self.file_name).get((message, field_index))


def compile_proto_file(path: Path, shown: str) -> ProtoSchema:
    """The .proto file at ``path`` compiled (imports looked up beside it); errors name it as
    ``shown``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtoSchemaError(f"{shown!r} cannot be read: {exc}") from None
    return compile_proto(text, path.name, include=path.parent, shown=shown)


_COMPILED: dict[tuple[str, str, str], ProtoSchema] = {}
_LOCK = threading.Lock()
_PROTOC = threading.Lock()
"""One compile at a time: protoc's compiler is not known to be safe to run concurrently."""


def compile_proto(
    text: str, file_name: str = _FILE_NAME, include: Path | None = None, shown: str | None = None
) -> ProtoSchema:
    """``text`` compiled as ``file_name``; remembered for the life of the process."""
    key = (text, file_name, str(include))
    with _LOCK:
        known = _COMPILED.get(key)
    if known is not None:
        return known
    with tempfile.TemporaryDirectory(prefix="kinesis-lake-proto-") as folder:
        root = Path(folder)
        (root / file_name).write_text(text, encoding="utf-8")
        includes = [root, *([] if include is None else [include])]
        with _PROTOC:
            data = _protoc(root / "schema.desc", includes, file_name, shown or file_name)
    schema = ProtoSchema(base64.b64encode(data).decode("ascii"), file_name)
    schema.file()  # loads, so a descriptor set protobuf refuses fails here, not later
    with _LOCK:
        _COMPILED[key] = schema
    return schema


def _protoc(out: Path, includes: list[Path], file_name: str, shown: str) -> bytes:
    """The descriptor set of ``file_name`` (imports and source info included), by protoc in
    this process: first asked for the file's errors, which it gives as values (``line`` and
    ``column`` from 0) where its command line would print them, then for the set."""
    import grpc_tools
    from grpc_tools import _protoc_compiler

    well_known = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    paths = [str(path).encode() for path in [*includes, well_known]]
    try:
        _protoc_compiler.get_protos(file_name.encode(), paths)
    except _protoc_compiler.ProtocErrors as exc:
        told = "; ".join(
            f"{error.filename.decode().replace(file_name, shown)}:{error.line + 1}:"
            f"{error.column + 1}: {error.message.decode()}"
            for error in exc.errors()
        )
        raise ProtoSchemaError(f"the .proto schema does not compile: {told}") from None
    args = [b"protoc", *(b"-I" + path for path in paths), b"--include_imports"]
    args += [b"--include_source_info", b"--descriptor_set_out=" + str(out).encode()]
    if _protoc_compiler.run_main([*args, file_name.encode()]) != 0:
        raise ProtoSchemaError(f"the .proto schema does not compile: protoc refused {shown}")
    return out.read_bytes()


def all_messages(file: FileDescriptor) -> list[Descriptor]:
    """Every message of ``file``, nested ones included (map entries too), level by level."""
    found: list[Descriptor] = []
    queue = list(file.message_types_by_name.values())
    while queue:
        message = queue.pop(0)
        found.append(message)
        queue.extend(message.nested_types)
    return found


_FILES: dict[tuple[str, str], FileDescriptor] = {}
_LINES: dict[tuple[str, str], dict[tuple[str, int], int]] = {}


def _file(descriptor_set: str, file_name: str) -> FileDescriptor:
    """The file's descriptor, in a pool of its own: two versions of one schema define the
    same names, which one pool refuses."""
    key = (descriptor_set, file_name)
    with _LOCK:
        known = _FILES.get(key)
        if known is not None:
            return known
        files = _descriptor_set(descriptor_set)
        pool = descriptor_pool.DescriptorPool()
        try:
            for proto in files.file:
                pool.Add(proto)
            file = pool.FindFileByName(file_name)
        except Exception as exc:  # protobuf raises TypeError, KeyError or its own Error
            raise ProtoSchemaError(f"the compiled schema does not load: {exc}") from None
        _FILES[key] = file
        return file


def _descriptor_set(descriptor_set: str) -> descriptor_pb2.FileDescriptorSet:
    files = descriptor_pb2.FileDescriptorSet()
    files.ParseFromString(base64.b64decode(descriptor_set))
    return files


def _lines(descriptor_set: str, file_name: str) -> dict[tuple[str, int], int]:
    """Per (message full name, field index), the field's line in the file."""
    key = (descriptor_set, file_name)
    with _LOCK:
        known = _LINES.get(key)
        if known is None:
            proto = next(f for f in _descriptor_set(descriptor_set).file if f.name == file_name)
            lines = {
                tuple(location.path): location.span[0] + 1
                for location in proto.source_code_info.location
            }
            known = {}
            prefix = f"{proto.package}." if proto.package else ""
            queue: list[tuple[str, Any, tuple[int, ...]]] = [
                (prefix + message.name, message, (4, index))
                for index, message in enumerate(proto.message_type)
            ]
            while queue:
                name, message, path = queue.pop(0)
                for index in range(len(message.field)):
                    line = lines.get((*path, 2, index))
                    if line is not None:
                        known[(name, index)] = line
                queue.extend(
                    (f"{name}.{nested.name}", nested, (*path, 3, index))
                    for index, nested in enumerate(message.nested_type)
                )
            _LINES[key] = known
        return known


def message_class(message: Descriptor) -> Any:
    """The Python class of ``message``, made once by protobuf (and cached by it)."""
    return message_factory.GetMessageClass(message)
