"""Schema evolution from the Glue Schema Registry (moto's), without Spark: a table declared
from ``registry_schema: latest`` evolves when a backward-compatible version is registered
(new optional field, int -> long, float -> double), records of the older version still
decode (resolved against the newer reader), and an incompatible version fails naming the
table, the column and both versions."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.types import DoubleType, LongType, StringType

from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.declaration_file import declaration_from_dict
from kinesis_lake.events.parse import route_events
from kinesis_lake.iceberg.tables import SchemaEvolutionError
from kinesis_lake.pipeline.routed_tables import FOLLOWS_PROPERTY, ensure_routed_table
from kinesis_lake_tests.events.raw import NOW, raw_table
from kinesis_lake_tests.events.registry import Registry, avro_datum, framed

ID = {"name": "id", "type": "string"}
V1 = {
    "type": "record",
    "name": "Reading",
    "fields": [ID, {"name": "count", "type": "int"}, {"name": "level", "type": "float"}],
}
V2 = {
    **V1,
    "fields": [
        ID,
        {"name": "count", "type": "long"},
        {"name": "level", "type": "double"},
        {"name": "unit", "type": ["null", "string"], "default": None},
        {"name": "site", "type": "string", "default": "main"},
    ],
}
V3 = {**V2, "fields": [ID, {"name": "count", "type": "string"}, *V2["fields"][2:]]}


def _lake(registry: Registry) -> LakeDeclaration:
    """The declaration as a refresh loads it: the registry's latest version now."""
    declared = declaration_from_dict(
        {
            "streams": [
                {
                    "name": "events",  # the stream raw_table's rows come from
                    "format": "glue-schema-registry",
                    "registry": {"region": "us-east-1", "endpoint_url": registry.endpoint_url},
                }
            ],
            "tables": [
                {
                    "name": "readings",
                    "registry_schema": {"registry": registry.name, "schema": "readings"},
                    "dedup": "id",
                }
            ],
        }
    )
    return LakeDeclaration.from_dict(declared.to_dict())


def _types(catalog: SqlCatalog) -> dict[str, Any]:
    schema = catalog.load_table("lake.readings").schema()
    return {f.name: f.field_type for f in schema.fields if f.name in ("count", "level", "unit")}


def test_a_compatible_registry_version_evolves_the_table_and_old_records_still_decode(
    registry, catalog
):
    v1 = registry.create("readings", V1)
    first = ensure_routed_table(catalog, "lake.readings", _lake(registry).tables[0])
    assert first.properties[FOLLOWS_PROPERTY] == "1"
    v2 = registry.register("readings", V2)

    lake = _lake(registry)  # the next refresh loads the declaration again
    evolved = ensure_routed_table(catalog, "lake.readings", lake.tables[0])

    assert _types(catalog) == {"count": LongType(), "level": DoubleType(), "unit": StringType()}
    assert evolved.properties[FOLLOWS_PROPERTY] == "2"
    old = framed(v1, avro_datum(V1, {"id": "a", "count": 3, "level": 0.5}))
    new = framed(
        v2, avro_datum(V2, {"id": "b", "count": 2**40, "level": 1e300, "unit": "m", "site": "x"})
    )
    routed = route_events(raw_table([old, new]), lake, now=NOW)
    assert routed.quarantine.num_rows == 0
    rows = sorted(routed.tables["readings"].to_pylist(), key=lambda row: row["id"])
    assert [(r["count"], r["level"], r["unit"], r["site"]) for r in rows] == [
        (3, 0.5, None, "main"),  # v1's record read as v2: the new fields' defaults
        (2**40, 1e300, "m", "x"),
    ]


def test_a_version_newer_than_the_declaration_decodes_as_written(registry):
    registry.create("readings", V1)
    lake = _lake(registry)  # declared at v1
    v2 = registry.register("readings", V2)  # a producer already writes v2
    record = {"id": "b", "count": 7, "level": 2.0, "unit": "m", "site": "x"}
    routed = route_events(raw_table([framed(v2, avro_datum(V2, record))]), lake, now=NOW)
    assert routed.quarantine.num_rows == 0
    assert routed.tables["readings"].to_pylist()[0]["count"] == 7


def test_an_incompatible_registry_version_fails_naming_table_column_and_versions(registry, catalog):
    registry.create("readings", V1)
    registry.register("readings", V2)
    ensure_routed_table(catalog, "lake.readings", _lake(registry).tables[0])
    registry.register("readings", V3)  # count: long -> string (a registry set to NONE)

    with pytest.raises(SchemaEvolutionError) as raised:
        ensure_routed_table(catalog, "lake.readings", _lake(registry).tables[0])

    message = str(raised.value)
    assert message.startswith(
        f"table 'readings' follows registry {registry.name}, schema readings, and version 3 "
        "(the registry's now) is not compatible with version 2 (the table's): "
    )
    assert "column 'count' is long in the table and string in the declared schema" in message
    assert message.endswith("or pin the table to it (registry_schema: version: 2)")
    assert catalog.load_table("lake.readings").properties[FOLLOWS_PROPERTY] == "2"
