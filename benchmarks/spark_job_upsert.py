"""The Spark child's ``upsert`` job: upsert refreshes timed on tables of two sizes.

Merge-on-read and copy-on-write, with the bytes each refresh writes and a full read
after many refreshes (the runner side is ``benchmarks.upsert_refresh``).
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.spark_job_kit import _settings, _table_shape, emit
from benchmarks.streams import SHARDS

_UPSERT_LAKE = """\
tables:
  - name: profile_changes
    fields:
      - {name: user_id, type: string, required: true}
      - {name: version, type: long, required: true}
      - {name: op, type: string}
      - {name: email, type: string}
      - {name: plan, type: string}
derived:
  - name: user_profiles
    from: profile_changes
    upsert: {key: user_id, version: version, delete: {field: op, equals: delete}}
"""


def _profile_rows(keys: list[int], version: int, first_sequence: int, schema: Any):
    """Parsed ``profile_changes`` rows (as derive writes them) for the users ``keys``."""
    import pyarrow as pa

    count = len(keys)
    now_us = int(time.time() * 1_000_000)
    columns = {
        "stream_name": ["bench"] * count,
        "shard_id": [f"shardId-{k % SHARDS:012d}" for k in keys],
        "sequence_number": [f"{49_000_000_000 + first_sequence + i:d}" for i in range(count)],
        "sub_sequence_number": [0] * count,
        "approximate_arrival_timestamp": [now_us] * count,
        "user_id": [f"user-{k:09d}" for k in keys],
        "version": [version] * count,
        "op": ["update"] * count,
        "email": [f"user-{k}@example.com" for k in keys],
        "plan": [("free", "pro", "team")[k % 3] for k in keys],
        "event_timestamp": [now_us] * count,
        "parsed_at": [now_us] * count,
    }
    return pa.Table.from_pydict(
        {name: pa.array(values, schema.field(name).type) for name, values in columns.items()},
        schema=schema,
    )


def _written(table: Any, source_snapshot_id: int | None) -> dict[str, int]:
    """What the refresh's commits wrote and removed: summed over its snapshots (a
    copy-on-write refresh commits a delete and an append, merge-on-read one snapshot)."""
    from kinesis_lake.iceberg.incremental import SOURCE_SNAPSHOT_PROPERTY

    totals = {
        "added-files-size": 0,
        "deleted-data-files": 0,
        "deleted-records": 0,
        "added-position-deletes": 0,
    }
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is None or summary.get(SOURCE_SNAPSHOT_PROPERTY) != str(source_snapshot_id):
            continue
        for key in totals:
            totals[key] += int(summary.get(key) or 0)
    return totals


def _read_seconds(table: Any, times: int = 3) -> float:
    """Median wall time of a full pyiceberg read of ``table`` (deletes applied)."""
    from statistics import median

    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        table.scan().to_arrow()
        seconds.append(time.perf_counter() - started)
    return round(median(seconds), 3)


def cmd_upsert(spark: Any, args: Any) -> dict[str, Any]:
    """Upsert tables of ``small`` and ``large`` keys, each merge-on-read (the default) and
    copy-on-write; per round, the same ``new_rows`` updates of uniformly random existing
    keys are appended to each source and one refresh of each table is timed. Then the
    small tables get refreshes up to ``read_refreshes`` in all, and a full read of each
    is timed: copy-on-write, merge-on-read as left, and after maintenance folded its
    deletes."""
    import random

    import yaml

    from kinesis_lake.events.declaration_file import declaration_from_dict
    from kinesis_lake.events.tables import parsed_table_schema
    from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
    from kinesis_lake.iceberg.catalog import ensure_namespace
    from kinesis_lake.iceberg.maintenance import compact
    from kinesis_lake.iceberg.tables import ensure_table
    from kinesis_lake.pipeline.lake import open_lake
    from kinesis_lake.pipeline.upsert import UPDATE_MODE, ensure_upsert_tables, refresh_upsert

    lake = declaration_from_dict(yaml.safe_load(_UPSERT_LAKE))
    (spec,) = lake.derived
    schema = parsed_table_schema(lake.table("profile_changes").schema)
    rng = random.Random(7)
    tables = {}
    build: dict[str, Any] = {}
    sizes = {"small": args.small, "large": args.large}
    for label, size in [
        (f"{mode}_{name}", n) for name, n in sizes.items() for mode in ("mor", "cow")
    ]:
        settings = _settings(args, f"{args.namespace}_{label}")
        catalog = open_lake(settings)
        ensure_namespace(catalog, settings.namespace)
        source = ensure_table(catalog, settings.table_identifier("profile_changes"), schema)
        arrow = table_arrow_schema(source.schema())
        started = time.perf_counter()
        for offset in range(0, size, 100_000):
            keys = list(range(offset, min(size, offset + 100_000)))
            source.append(_profile_rows(keys, 1, offset, arrow))
        append_s = time.perf_counter() - started
        started = time.perf_counter()
        upsert = ensure_upsert_tables(catalog, settings, spec, source)
        mode = "merge-on-read" if label.startswith("mor") else "copy-on-write"
        for table in (upsert.table, upsert.tombstones):
            with table.transaction() as tx:
                tx.set_properties(
                    {"write.target-file-size-bytes": str(args.file_bytes), UPDATE_MODE: mode}
                )
        refresh_upsert(spark, spec, source, ensure_upsert_tables(catalog, settings, spec, source))
        build[label] = {
            "keys": size,
            "mode": mode,
            "append_s": round(append_s, 2),
            "first_refresh_s": round(time.perf_counter() - started, 2),
            **_table_shape(settings, settings.table_identifier("user_profiles")),
        }
        tables[label] = (settings, size, arrow)
        emit("BENCH_EVENT", {"built": label, **build[label]})
    refreshes = []
    done = dict.fromkeys(tables, 0)

    def refresh(label: str, round_index: int) -> dict[str, Any]:
        settings, size, arrow = tables[label]
        catalog = open_lake(settings)
        source = catalog.load_table(settings.table_identifier("profile_changes"))
        keys = rng.sample(range(size), args.new_rows)
        source.append(_profile_rows(keys, round_index + 2, 10**9 + round_index * 10**6, arrow))
        upsert = ensure_upsert_tables(catalog, settings, spec, source)
        started = time.perf_counter()
        result = refresh_upsert(spark, spec, source, upsert)
        seconds = time.perf_counter() - started
        identifier = settings.table_identifier("user_profiles")
        written = _written(catalog.load_table(identifier), result.source_snapshot_id)
        done[label] += 1
        return {
            "table": label,
            "keys": size,
            "round": round_index,
            "seconds": round(seconds, 3),
            "keys_touched": result.rows_written,
            "bytes_written": written["added-files-size"],
            "files_rewritten": written["deleted-data-files"],
            "rows_rewritten": written["deleted-records"],
            "rows_deleted_by_position": written["added-position-deletes"],
            "data_files": _table_shape(settings, identifier)["data_files"],
        }

    for round_index in range(args.rounds):
        for label in tables:
            refreshes.append(refresh(label, round_index))
            emit("BENCH_EVENT", refreshes[-1])
    reads: dict[str, Any] = {}
    for label in ("mor_small", "cow_small"):
        started = time.perf_counter()
        while done[label] < args.read_refreshes:
            refresh(label, done[label])
        settings = tables[label][0]
        table = open_lake(settings).load_table(settings.table_identifier("user_profiles"))
        reads[label] = {
            "refreshes": done[label],
            "refresh_all_s": round(time.perf_counter() - started, 1),
            "read_s": _read_seconds(table),
            "rows_read": len(table.scan().to_arrow()),  # "rows" below counts deleted rows too
            **_table_shape(settings, settings.table_identifier("user_profiles")),
        }
        emit("BENCH_EVENT", {"read": label, **reads[label]})
    settings = tables["mor_small"][0]
    table = open_lake(settings).load_table(settings.table_identifier("user_profiles"))
    started = time.perf_counter()
    report = compact(table, target_file_size_bytes=args.file_bytes)
    reads["mor_small_maintained"] = {
        "maintenance_s": round(time.perf_counter() - started, 2),
        "delete_files_folded": report.delete_files_folded,
        "read_s": _read_seconds(table),
        "rows_read": len(table.scan().to_arrow()),  # "rows" below counts deleted rows too
        **_table_shape(settings, settings.table_identifier("user_profiles")),
    }
    emit("BENCH_EVENT", {"read": "mor_small_maintained", **reads["mor_small_maintained"]})
    return {"build": build, "refreshes": refreshes, "reads": reads}
