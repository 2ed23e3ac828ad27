"""Coverage-guided fuzz targets (atheris) for the code that touches every record first.

Run one with ``python -m kinesis_lake_tests.fuzz.targets TARGET [libFuzzer flags]``, e.g.
``-max_total_time=600``; ``make fuzz`` runs them all, ``test_atheris.py`` briefly in
``make test``. A target raises (and atheris saves the input as ``crash-*``) when the
code under test raises or breaks its promise: every record comes out exactly once,
either valid or flagged / quarantined with a reason.

Targets:
- ``kpl``: bytes as a KPL aggregate body (with a valid or broken MD5 digest) through
  the KPL decoder and ``records_to_arrow``, the path of every Kinesis record.
- ``arrow``: arbitrary field values through ``records_to_arrow``.
- ``parse``: arbitrary payloads (JSON-ish bytes) through the event parser, under a
  schema that declares every field type.
- ``payloads``: arbitrary records of an ``avro``, a ``protobuf`` and a
  ``glue-schema-registry`` stream (any header and compression bytes before the UUID of an
  Avro, Protobuf or JSON Schema version registered on an in-process moto Glue, or of one it
  does not know) through ``route_events``, the parser of a lake of such streams.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path

import atheris
import pyarrow as pa
from moto.server import ThreadedMotoServer

with atheris.instrument_imports(include=["kinesis_lake"]):
    from kinesis_lake.events.declaration import LakeDeclaration
    from kinesis_lake.events.declaration_file import declaration_from_dict
    from kinesis_lake.events.parse import parse_events, route_events
    from kinesis_lake.events.schema import EventSchema
    from kinesis_lake.kinesis.kpl import KPL_MAGIC, aggregate, user_records
    from kinesis_lake.kinesis.records import KinesisRecord
    from kinesis_lake.record_rows import RECORD_ARROW_SCHEMA
    from kinesis_lake.spark.kinesis.arrow import records_to_arrow

from kinesis_lake_tests.events.avro_records import MAPPED, mapped_record
from kinesis_lake_tests.events.protobuf_records import (
    TIMED_EVENT_PROTO,
    message_classes,
    registry_body,
)
from kinesis_lake_tests.events.raw import NOW, raw_table
from kinesis_lake_tests.events.registry import Registry, avro_datum

SHARD = "shardId-000000000000"
REQUIRED = [f.name for f in RECORD_ARROW_SCHEMA if not f.nullable]
EVERY_TYPE = EventSchema.from_dict(
    {
        "name": "every_type",
        "fields": [
            {"name": "id", "type": "string", "required": True},
            {"name": "kind", "type": "string", "required": True},
            {"name": "l", "type": "long"},
            {"name": "i", "type": "int"},
            {"name": "d", "type": "double"},
            {"name": "f", "type": "float"},
            {"name": "b", "type": "boolean"},
            {"name": "t", "type": "timestamp", "required": True},
            {"name": "dt", "type": "date"},
            {"name": "m", "type": "decimal(10,2)"},
        ],
        "event_key": "id",
        "event_time_field": "t",
        "event_type_field": "kind",
    }
)


def _check_batch(records: list[KinesisRecord]) -> None:
    """records_to_arrow keeps every record, in order, with every required column set."""
    batch = records_to_arrow("stream", SHARD, records)
    assert batch.num_rows == len(records), (batch.num_rows, len(records))
    assert batch.schema == RECORD_ARROW_SCHEMA
    for name in REQUIRED:
        assert batch.column(name).null_count == 0, name


def fuzz_kpl(data: bytes) -> None:
    """Byte 0 picks the digest (bit 0: valid, else broken), byte 1 the outer key's shape."""
    if len(data) < 2:
        return
    body = data[2:]
    digest = hashlib.md5(body).digest()
    if not data[0] & 1:
        digest = bytes([digest[0] ^ 0xFF]) + digest[1:]
    outer_key = "outer" if data[1] & 1 else body[:16].decode("utf-8", "replace") or "k"
    records = user_records(
        "49590338271490256608559692538361571095921575989136588898",
        outer_key,
        1_700_000_000_000,
        KPL_MAGIC + body + digest,
    )
    assert records, "a Kinesis record gives at least one user record"
    for index, record in enumerate(records):
        if record.error is None:
            assert record.aggregated and isinstance(record.partition_key, str)
            assert record.sub_sequence_number == index
    if any(not r.aggregated for r in records):
        assert len(records) == 1 and records[0].error is not None  # kept whole, flagged
    _check_batch(records)


def fuzz_arrow(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    records = []
    for _ in range(provider.ConsumeIntInRange(0, 5)):
        key_kind = provider.ConsumeIntInRange(0, 2)
        key: object = (
            provider.ConsumeBytes(provider.ConsumeIntInRange(0, 40))
            if key_kind == 0
            else provider.ConsumeUnicode(provider.ConsumeIntInRange(0, 40))
        )
        records.append(
            KinesisRecord(
                provider.ConsumeUnicode(provider.ConsumeIntInRange(0, 60)),
                provider.ConsumeInt(10),
                key,  # type: ignore[arg-type]
                provider.ConsumeInt(10),
                provider.ConsumeBytes(provider.ConsumeIntInRange(0, 100)),
                provider.ConsumeBool(),
                provider.ConsumeUnicode(20) if provider.ConsumeBool() else None,
            )
        )
    _check_batch(records)


def fuzz_parse(data: bytes) -> None:
    """Payloads separated by 0x00 bytes, each a record; every one parsed or quarantined."""
    payloads = data.split(b"\x00")[:8]
    parsed, quarantine = parse_events(raw_table(payloads), EVERY_TYPE, now=NOW)
    assert parsed.num_rows + quarantine.num_rows == len(payloads)
    sequences = parsed.column("sequence_number").to_pylist()
    sequences += quarantine.column("sequence_number").to_pylist()
    assert sorted(sequences, key=int) == [str(i + 1) for i in range(len(payloads))]
    assert quarantine.column("error").null_count == 0, "a quarantined row says why"


EVENT_JSON_SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {"id": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
}
STREAMS = ("avro", "proto", "registry")
"""A record's first byte picks its stream; a registry record's second, the version its
header names (``_registry_lake``'s, then one no registry knows)."""
RECORD_SEPARATOR = b"\xff\x00\xfe\x01"
UNKNOWN_VERSION = uuid.UUID("00000000-0000-4000-8000-000000000000")


@functools.cache
def _registry_lake() -> tuple[LakeDeclaration, tuple[uuid.UUID, ...]]:
    """The fuzzed lake and its registry's versions (Avro, Protobuf, JSON Schema), on a moto
    server in this process: libFuzzer ends the process by exit(), which a child would
    outlive. Started on the first input; each version is fetched once, then cached."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    registry = Registry(f"http://{host}:{port}")
    versions = (
        registry.create("mapped", MAPPED),
        registry.create("events", TIMED_EVENT_PROTO, "PROTOBUF"),
        registry.create("plain", EVENT_JSON_SCHEMA, "JSON"),
        UNKNOWN_VERSION,
    )
    where = {"region": "us-east-1", "endpoint_url": registry.endpoint_url}
    common = [
        {"name": "id", "type": "string", "required": True},
        {"name": "kind", "type": "string"},
    ]
    lake = declaration_from_dict(
        {
            "streams": [
                {"name": "avro", "format": "avro", "schema": MAPPED},
                {"name": "proto", "format": "protobuf", "schema": TIMED_EVENT_PROTO},
                {"name": "registry", "format": "glue-schema-registry", "registry": where},
            ],
            "tables": [
                {
                    "name": "mapped",
                    "stream": "avro",
                    "fields": [
                        *common,
                        {"name": "at", "type": "timestamp"},
                        {"name": "seen", "type": "timestamp"},
                        {"name": "day", "type": "date"},
                        {"name": "price", "type": "decimal(10,2)"},
                        {"name": "tags", "type": "list<string>"},
                        {"name": "counts", "type": "map<long>"},
                        {
                            "name": "page",
                            "type": "struct",
                            "fields": [{"name": "ms", "type": "int"}],
                        },
                        {"name": "ref", "type": "string"},
                    ],
                },
                {
                    "name": "events",
                    "stream": "proto",
                    "fields": [
                        *common,
                        {"name": "n", "type": "long"},
                        {"name": "at", "type": "timestamp"},
                        {"name": "counts", "type": "map<int>"},
                    ],
                },
                {
                    "name": "registered",
                    "stream": "registry",
                    "fields": [*common, {"name": "n", "type": "long"}],
                },
            ],
        }
    )
    return LakeDeclaration.from_dict(lake.to_dict()), versions  # as the executors get it


def fuzz_payloads(data: bytes) -> None:
    """Records separated by ``RECORD_SEPARATOR``; each decodes and lands in every table
    (typed or quarantined for it) or is quarantined once, always with a reason."""
    lake, versions = _registry_lake()
    streams, payloads = [], []
    for record in data.split(RECORD_SEPARATOR)[:8]:
        if len(record) < 2:
            continue
        stream = STREAMS[record[0] % len(STREAMS)]
        streams.append(stream)
        if stream == "registry":  # any header bytes, a known or unknown version's UUID
            version = versions[record[1] % len(versions)]
            payloads.append(record[2:4] + version.bytes + record[4:])
        else:
            payloads.append(record[1:])
    raw = raw_table(payloads).set_column(0, "stream_name", pa.array(streams, pa.string()))

    routed = route_events(raw, lake, now=NOW)

    quarantine = routed.quarantine
    assert quarantine.column("error").null_count == 0, "a quarantined row says why"
    rows: dict[str, list[str | None]] = {str(i + 1): [] for i in range(len(payloads))}
    for name, table in routed.tables.items():
        for sequence in table.column("sequence_number").to_pylist():
            rows[sequence].append(name)
    targets = quarantine.column("target_table").to_pylist()
    for sequence, target in zip(
        quarantine.column("sequence_number").to_pylist(), targets, strict=True
    ):
        rows[sequence].append(target)
    every_table = sorted(table.name for table in lake.tables)
    for sequence, landed in rows.items():
        assert landed == [None] or sorted(landed) == every_table, (sequence, landed)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "kpl": fuzz_kpl,
    "arrow": fuzz_arrow,
    "parse": fuzz_parse,
    "payloads": fuzz_payloads,
}


def _payload_seeds() -> list[bytes]:
    """Valid records of each stream and registry version, one input each and all together."""
    event = message_classes(TIMED_EVENT_PROTO)["p.Event"](id="e1", n=5, tags=["t"], kind="B")
    event.counts.update({"k": 3})
    event.at.FromSeconds(1_714_557_600)
    avro = avro_datum(MAPPED, mapped_record(3))
    records = [
        b"\x00" + avro,
        b"\x01" + event.SerializeToString(),
        b"\x02\x00\x03\x00" + avro,
        b"\x02\x00\x03\x05" + zlib.compress(avro),
        b"\x02\x01\x03\x00" + registry_body(event),
        b"\x02\x02\x03\x00" + b'{"id": "j1", "n": 2}',
        b"\x02\x03\x03\x00" + avro,
    ]
    assert not any(RECORD_SEPARATOR in record for record in records)
    return [*records, RECORD_SEPARATOR.join(records)]


def seeds(target: str) -> list[bytes]:
    """A few valid inputs, so the fuzzer starts from the formats' happy paths."""
    if target == "kpl":
        body = aggregate([("user-1", b'{"a":1}'), ("user-2", b"x" * 40)])[4:-16]
        return [b"\x01\x01" + body, b"\x01\x00" + body, b"\x00\x01" + body]
    if target == "parse":
        event = (
            b'{"id":"e1","kind":"click","l":1,"i":2,"d":1.5,"f":2.5,"b":true,'
            b'"t":"2024-05-01T10:00:00Z","dt":"2024-05-01","m":"12.34"}'
        )
        hostile = [  # the shapes issue 15 found, for the fuzzer to mutate further
            b'{"id":"d","kind":"k","t":"2024-05-01T10:00:00Z","l":'
            + b"[" * 1000
            + b"]" * 1000
            + b"}",
            b'{"id":"y","kind":"t","t":"9999-12-31T23:59:30Z","d":1e400,"l":' + b"9" * 5000 + b"}",
            b'\xef\xbb\xbf{"id":"a","id":"b","kind":"k","t":1714557600,"m":"1e3"}',
            b'{"id":"","kind":"k","t":"1714557600000","dt":"0001-01-01","f":3.5e38}',
        ]
        return [event, event + b"\x00" + b'{"id":"e2","t":1714557600000}', b"[]\x00{}", *hostile]
    if target == "payloads":
        return _payload_seeds()
    return [b"\x03" + bytes(range(64))]


def main(argv: list[str]) -> None:
    """``argv[1]`` names the target; the rest are libFuzzer flags and corpus folders.

    With no corpus folder given, ``.data/fuzz/TARGET`` is used (git-ignored, kept between
    runs so a long run builds on the last), seeded first."""
    target = TARGETS[argv[1]]
    flags = [a for a in argv[2:] if a.startswith("-")]
    corpora = [a for a in argv[2:] if not a.startswith("-")]
    if not corpora:
        corpus = Path(".data") / "fuzz" / argv[1]
        corpus.mkdir(parents=True, exist_ok=True)
        for index, seed in enumerate(seeds(argv[1])):
            (corpus / f"seed-{index}").write_bytes(seed)
        corpora = [str(corpus)]
    atheris.Setup([argv[0], *flags, *corpora], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
