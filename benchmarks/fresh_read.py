"""Benchmark 15: put -> visible through a fresh read, and what ``query --fresh`` costs
(issue 36: "put -> visible through --fresh: p99 <= 0.5 s; and its cost against the same
query without it").

Records of the demo's clickstream are put one PutRecords call each, at a steady rate, into a
4-shard stream on the shared kinesalite, while this process reads the routed table
``events`` (the shipped declaration's table of every event) fresh with
:func:`kinesis_lake.pipeline.fresh_read.fresh_read`, one read after another. A record is
visible when the first read that holds it returns; its latency is that moment minus the
moment its put was issued. No pipeline commits meanwhile (the tables exist, empty): the
tail a read takes grows to every record put so far, so a read here is the one a lake gets
when its pipeline has been idle the whole run, heavier than between the lingering
ingestion's commits, which keep the tail to a few seconds of records. Afterwards the same
SQL runs through :func:`kinesis_lake.iceberg.query.run_sql` (``query``'s code, without
the CLI's process start) with and without the fresh read, alternating, and one more fresh
read runs under cProfile: where a fresh read's time goes, by phase.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import percentile, ratio, verdict
from benchmarks.streams import SHARDS, settings_for
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.iceberg.query import run_sql
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.producer import put_records, sample_events
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake.pipeline.downstream_tables import ensure_downstream_tables
from kinesis_lake.pipeline.fresh_read import fresh_read
from kinesis_lake.pipeline.lake import open_lake

NAME = "fresh_read"
SPARK_MASTERS: tuple[str, ...] = ()  # a fresh read needs no Spark
SECONDS = {"quick": 30.0, "full": 120.0}
RATE_PER_S = 20.0
TABLE = "events"
SQL = f"SELECT event_type, count(*) AS n FROM {TABLE} GROUP BY 1 ORDER BY 1"
QUERY_ROUNDS = 5
TARGET_P99_S = 0.5
SHIPPED = Path(__file__).resolve().parents[1] / "schemas" / "clickstream.yaml"


def _producer(
    client: Any, stream: str, entries: list[tuple[str, bytes]], issued: dict[str, float]
) -> threading.Thread:
    """Puts one entry every 1/RATE_PER_S s, noting when each put was issued."""

    def produce() -> None:
        began = time.perf_counter()
        for index, entry in enumerate(entries):
            delay = began + index / RATE_PER_S - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            issued[json.loads(entry[1])["event_id"]] = time.perf_counter()
            put_records(client, stream, [entry], batch_size=1)

    thread = threading.Thread(target=produce, name="fresh-read-producer", daemon=True)
    thread.start()
    return thread


def _profile_top(read: Any, rows: int = 12) -> list[dict[str, Any]]:
    """Where one fresh read's time goes: the project's functions by cumulative time
    (cProfile), so the phases (metadata, declaration, tail read, routing) show."""
    profile = cProfile.Profile()
    profile.runcall(read)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    ours = [(key, value) for key, value in stats.items() if "/kinesis_lake/" in key[0]]
    ours.sort(key=lambda item: item[1][3], reverse=True)
    return [
        {
            "function": f"{file.split('/kinesis_lake/')[-1]}:{line}({name})",
            "calls": calls,
            "own_s": round(own, 3),
            "cumulative_s": round(cumulative, 3),
        }
        for (file, line, name), (_, calls, own, cumulative, _) in ours[:rows]
    ]


def run(ctx: BenchContext) -> dict[str, Any]:
    seconds = SECONDS[ctx.mode] * min(1.0, max(ctx.scale, 0.2))
    count = int(seconds * RATE_PER_S)
    stream = f"bench-fresh-{int(time.time())}"
    settings = settings_for(
        ctx, stream, "fresh_read", data_dir=ctx.scratch(NAME), event_schema_path=SHIPPED
    )
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, stream, SHARDS)
    catalog = open_lake(settings)
    ensure_namespace(catalog, settings.namespace)
    ensure_raw_table(catalog, settings.raw_table)
    ensure_downstream_tables(settings, load_declaration(SHIPPED))

    entries = sample_events(count, seed=5)
    issued: dict[str, float] = {}
    seen: dict[str, float] = {}
    reads: list[dict[str, Any]] = []
    producer = _producer(client, stream, entries, issued)
    deadline = time.perf_counter() + seconds + 30
    while (producer.is_alive() or len(seen) < count) and time.perf_counter() < deadline:
        began = time.perf_counter()
        fresh = fresh_read(settings, TABLE, client=client)
        done = time.perf_counter()
        ids = fresh.table.column("event_id").to_pylist()
        for event_id in ids:
            if event_id not in seen and event_id in issued:
                seen[event_id] = done
        reads.append({"s": round(done - began, 4), "tail_records": fresh.tail_records})
    latencies = sorted(seen[event_id] - issued[event_id] for event_id in seen)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)

    def fresh_table(name: str) -> Any:
        return fresh_read(settings, name, client=client).table

    query_s: dict[str, list[float]] = {"snapshot": [], "fresh": []}
    for round_number in range(QUERY_ROUNDS):
        for label in ("snapshot", "fresh") if round_number % 2 == 0 else ("fresh", "snapshot"):
            began = time.perf_counter()
            run_sql(
                catalog, settings.namespace, SQL, read=fresh_table if label == "fresh" else None
            )
            query_s[label].append(round(time.perf_counter() - began, 4))
    query_median = {label: statistics.median(runs) for label, runs in query_s.items()}
    read_s = [read["s"] for read in reads]
    return {
        "records": count,
        "rate_per_s": RATE_PER_S,
        "seconds": round(seconds, 1),
        "visible": len(seen),
        "latency_s": {
            "p50": _round(p50),
            "p99": _round(p99),
            "max": _round(latencies[-1] if latencies else None),
        },
        "reads": len(reads),
        "read_s": {"p50": _round(percentile(read_s, 50)), "p99": _round(percentile(read_s, 99))},
        "tail_records_last_read": reads[-1]["tail_records"] if reads else None,
        "read_timeline": reads[:: max(1, len(reads) // 40)],
        "query": {
            "sql": SQL,
            "seconds": query_s,
            "median_s": {label: round(value, 4) for label, value in query_median.items()},
        },
        "query_cost_ratio": ratio(query_median["fresh"], query_median["snapshot"]),
        "ratio": ratio(p99, TARGET_P99_S),
        "target": f"put -> visible p99 <= {TARGET_P99_S} s (issue 36)",
        "verdict": verdict(p99, TARGET_P99_S, at_least=False) if len(seen) == count else "MISSED",
        "profile_top": _profile_top(lambda: fresh_read(settings, TABLE, client=client)),
        "load_average": load_now(),
        "notes": (
            f"{count:,} records put one per call at {RATE_PER_S:g}/s into a {SHARDS}-shard "
            f"stream on kinesalite while `{TABLE}` was read fresh back to back; latency = "
            "return of the first read holding a record - issue of its put. No commit during "
            "the run: each read's tail is every record put so far (at the end "
            "tail_records_last_read), the heaviest tail a quiet pipeline leaves. ratio = "
            "p99 / target."
        ),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
