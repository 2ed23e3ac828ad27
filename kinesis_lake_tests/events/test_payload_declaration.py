"""A stream's ``format:`` in the declaration file: loaded with its schema, shipped to the
executors intact, and refused at load time with the file, the line, the stream and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinesis_lake.events.declaration import DeclarationError, LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.payload_formats import JSON_FORMAT

SCHEMA = {"type": "record", "name": "Click", "fields": [{"name": "id", "type": "string"}]}
TABLES = "tables:\n  - {name: clicks, fields: [{name: id, type: string}]}\n"


def _load(tmp_path: Path, stream: str) -> LakeDeclaration:
    path = tmp_path / "lake.yaml"
    path.write_text(f"streams:\n  - {stream}\n{TABLES}")
    return load_declaration(path)


def test_formats_load_with_their_schemas_and_survive_the_trip_to_the_executors(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "click.avsc").write_text(json.dumps(SCHEMA))
    from_file = _load(tmp_path, "{name: s, format: avro, schema_file: schemas/click.avsc}")
    registry = _load(
        tmp_path,
        "{name: s, format: glue-schema-registry, registry: {region: eu-west-1, endpoint_url: "
        f"'http://127.0.0.1:1'}}, schema: '{json.dumps(SCHEMA)}'}}",
    )
    plain = _load(tmp_path, "{name: s}")

    (stream,) = from_file.streams
    assert (stream.format.kind, stream.format.schema) == ("avro", SCHEMA)
    (stream,) = registry.streams
    assert (stream.format.region, stream.format.endpoint_url) == ("eu-west-1", "http://127.0.0.1:1")
    assert stream.format.schema == SCHEMA
    assert plain.streams[0].format == JSON_FORMAT
    for lake in (from_file, registry, plain):
        assert LakeDeclaration.from_dict(lake.to_dict()).streams == lake.streams


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ("{name: s, format: parquet}", "format 'parquet' is unknown; use one of json, avro"),
        ("{name: s, format: avro}", "format avro needs the writers' schema: schema: (inline)"),
        ("{name: s, schema_file: x.avsc}", "schema_file applies to format avro, protobuf or glue-"),
        ("{name: s, format: avro, schema_file: nope.avsc}", "schema_file 'nope.avsc' cannot be"),
        ("{name: s, format: avro, schema: {type: string}}", "the Avro schema must be a record"),
        (
            "{name: s, format: avro, schema: {type: record, name: R, fields: [{name: a, type: "
            "nosuch}]}}",
            "the Avro schema does not parse: ",
        ),
        ("{name: s, format: avro, schema: '{', }", "schema is not JSON"),
        (
            "{name: s, format: avro, schema: {type: record, name: R, fields: []}, registry: {}}",
            "registry applies to format glue-schema-registry only",
        ),
        (
            "{name: s, format: glue-schema-registry, registry: {url: x}}",
            "registry must be a mapping with region and/or endpoint_url",
        ),
    ],
)
def test_a_format_that_cannot_be_used_stops_the_load_naming_file_line_and_stream(
    tmp_path, stream, message
):
    with pytest.raises(DeclarationError) as raised:
        _load(tmp_path, stream)
    assert str(raised.value).startswith(f"{tmp_path / 'lake.yaml'}:2: streams[0]: stream 's': ")
    assert message in str(raised.value)
