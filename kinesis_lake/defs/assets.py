"""The lake's tables as Dagster assets: each stream's raw table and the derived tables.

The stream they are ingested from, an external asset, is in :mod:`kinesis_lake.defs.streams`.

Assets only start library code and report what it did: ingestion is
``kinesis_lake.pipeline.ingest``, the derived tables ``kinesis_lake.pipeline.derive``.
Metadata keys are stable (dashboards, the CLI and the README refer to them) and numeric
where the UI should plot them.

Who runs what:

* ``raw_events``: the backlog sensor (``sensors.py``), only when the stream holds records
  past the committed positions; one at a time per stream (pool ``kinesis_lake_ingestion``,
  ``kinesis_lake_ingestion_<raw table>`` for each declared stream; limit 1 in
  ``dagster.yaml``), because one Spark checkpoint admits one query. With
  ``KINESIS_LAKE_RUN_LINGER_SECONDS`` a run goes on while records keep arriving and records
  each committed micro-batch as a raw_events materialization as it goes. For low latency,
  ``kinesis-lake stream`` (or ``ingest_continuously`` in a step of your own) runs the same query
  continuously instead (stop the backlog sensor meanwhile: the sensor does not know about
  it) and records each micro-batch as a runless raw_events materialization with the same
  metadata keys (``raw_batch_materialization``).
* the declared tables (one asset each, from the declaration file), ``events_quarantine`` and
  ``event_counts_per_minute``: declarative automation, eagerly after every raw update,
  unless a blocking check of raw failed (duplicates). With lingering runs, the ingestion
  run itself after each raw commit, once that check passed on it (``follow.py``).
* every materialization is one commit of its table, recorded when it lands.
* upkeep is not an asset: the ``iceberg_maintenance`` job (``maintenance.py``) records it
  on each table as an observation.
"""

import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pyiceberg.schema import Schema

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource, SparkResource
from kinesis_lake.defs.streams import DEFAULT_STREAM, INGESTION_GROUP, OWNERS, StreamKeys
from kinesis_lake.defs.tables import (
    DERIVE_POOL,
    EVENT_COUNTS_PER_MINUTE,
    EVENTS_QUARANTINE,
    rate,
    refresh_materialization,
    table_column_schema,
    table_metadata,
)
from kinesis_lake.events.declaration import (
    AGGREGATE_TABLE,
    QUARANTINE_TABLE,
    LakeDeclaration,
    TableDeclaration,
)
from kinesis_lake.events.derived_tables import DerivedTable
from kinesis_lake.events.tables import (
    aggregate_table_schema,
    parsed_table_schema,
    quarantine_table_schema,
)
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.preflight import check_event_schema, preflight

if TYPE_CHECKING:
    # Type only: loading the definitions must not import PySpark.
    from kinesis_lake.pipeline.derive import DeriveResult
    from kinesis_lake.pipeline.ingest_report import BatchReport, IngestResult
    from kinesis_lake.pipeline.refresh import TableRefresh

DERIVED_GROUP = "derived"

RAW_EVENTS = DEFAULT_STREAM.raw_asset


def raw_asset(keys: StreamKeys) -> dg.AssetsDefinition:
    """The raw table one stream is ingested into."""

    @dg.asset(
        key=keys.raw_asset,
        deps=[keys.stream_asset],
        group_name=INGESTION_GROUP,
        kinds={"spark", "iceberg"},
        owners=OWNERS,
        pool=keys.ingestion_pool,
        # A lingering run records each commit as it lands and nothing more at its end.
        output_required=False,
        description=(
            "Every Kinesis user record exactly once, payload bytes untouched. A run drains "
            "what the stream holds when it starts (Spark availableNow; with "
            "KINESIS_LAKE_RUN_LINGER_SECONDS it goes on while records keep arriving, records "
            "each commit as a materialization as it lands, and brings the downstream tables "
            "along after each) and commits each micro-batch with its shard positions; "
            "replays are skipped by batch id."
        ),
    )
    def raw(
        context: dg.AssetExecutionContext,
        settings: PipelineSettingsResource,
        kinesis: KinesisResource,
        spark: SparkResource,
    ) -> Iterator[dg.MaterializeResult]:
        lake = keys.lake(settings, kinesis)
        from kinesis_lake.pipeline.ingest import run_ingestion  # PySpark: only when a step runs

        preflight(lake, event_schema=False)  # before the JVM starts, in one line
        if lake.run_linger_seconds:
            # A lingering run can go on for minutes: each commit is a materialization as it
            # lands (one per commit: the run adds no total of its own at the end), and the
            # downstream tables follow each (defs/follow.py), checks first.
            _linger(context, lake, keys, spark, {"settings": settings, "kinesis": kinesis})
            return
        result = run_ingestion(spark.session, lake)
        context.log.info(
            f"Ingested {result.rows} rows in {result.batches} micro-batches from "
            f"{result.shards_read} shards ({result.rows_per_second:,.0f} rows/s); "
            f"skipped ranges: {result.skipped_ranges}"
        )
        table = open_lake(lake).load_table(lake.raw_table)
        metadata = {
            **table_metadata(lake.raw_table, table),
            "dagster/row_count": result.raw_rows_total,
            "rows_added": result.rows,
            "batches": result.batches,
            "seconds": round(result.seconds, 3),
            "rows_per_second": round(result.rows_per_second, 1),
            "shards_read": result.shards_read,
            "skipped_ranges": result.skipped_ranges,
            **_lag_metadata(result.max_millis_behind_latest, result.millis_behind_latest),
        }
        if result.snapshot_id is not None:
            metadata["snapshot_id"] = int(result.snapshot_id)
        yield dg.MaterializeResult(metadata=metadata)

    return raw


def _linger(
    context: dg.AssetExecutionContext,
    lake: Settings,
    keys: StreamKeys,
    spark: SparkResource,
    check_resources: dict[str, Any],
) -> None:
    """A lingering run: ingest, recording each commit, with the downstream follower beside."""
    from kinesis_lake.defs.follow import DownstreamFollower  # it imports the checks
    from kinesis_lake.pipeline.ingest import run_ingestion

    session = spark.session
    follower: DownstreamFollower | None = None
    try:
        check_event_schema(lake)
        follower = DownstreamFollower(context, lake, keys, session, check_resources).start()
    except Exception as error:  # ingestion goes on; the automation derives after the run
        context.log.error(f"The downstream tables will not follow this run: {error}")

    def on_batch(batch: "BatchReport") -> None:
        context.log_event(raw_batch_materialization(lake, batch))
        if follower is not None:
            follower.raw_committed()

    try:
        result = run_ingestion(
            session, lake, on_batch=on_batch, busy=follower.busy if follower else None
        )
    finally:
        if follower is not None:
            follower.finish()
    context.log.info(
        f"Ingested {result.rows} rows in {result.batches} commits from {result.shards_read} "
        f"shards in {result.seconds:.0f} s, lingering included; skipped ranges: "
        f"{result.skipped_ranges}"
    )


raw_events = raw_asset(DEFAULT_STREAM)


def _lag_metadata(max_lag: int, by_shard: dict[str, int]) -> dict[str, int]:
    return {
        "max_millis_behind_latest": max_lag,
        **{f"millis_behind_latest/{shard}": lag for shard, lag in sorted(by_shard.items())},
    }


def raw_batch_materialization(settings: Settings, batch: "BatchReport") -> dg.AssetMaterialization:
    """One micro-batch of continuous ingestion as a raw_events materialization.

    The keys are a raw_events run's (``rows_added``, ``dagster/row_count``, lag,
    ``skipped_ranges``), so the asset's plots run on across runs and streamed batches,
    and the data-loss check reads whichever of the two came last.
    """
    metadata: dict[str, Any] = {
        "dagster/table_name": settings.raw_table,
        "dagster/row_count": batch.raw_rows_total,
        "rows_added": batch.rows,
        "batch_id": batch.batch_id,
        "seconds": round(batch.seconds, 3),
        "rows_per_second": rate(batch.rows, batch.seconds),
        "skipped_ranges": batch.skipped_ranges,
        **_lag_metadata(batch.max_millis_behind_latest, batch.millis_behind_latest),
    }
    if batch.snapshot_id is not None:
        metadata["snapshot_id"] = int(batch.snapshot_id)
    return dg.AssetMaterialization(
        asset_key=dg.AssetKey(settings.raw_table_name),
        description=f"Continuous ingestion: micro-batch {batch.batch_id} added {batch.rows} rows.",
        metadata=metadata,
    )


def raw_batch_reporter(
    settings: Settings,
    instance: dg.DagsterInstance | None,
    then: Callable[["BatchReport"], None] | None = None,
) -> Callable[["BatchReport"], None]:
    """The ``on_batch`` of continuous ingestion, the same for ``kinesis-lake stream`` and
    ``ingest_continuously``: record each batch on ``instance`` (if any),
    then pass it to ``then``.

    Recorded as runless events: a stream outlives any run, so no run owns its batches.
    ``then`` sees every batch even when recording it failed (the failure is raised after,
    and the ingestion loop logs it and goes on).
    """

    def report(batch: "BatchReport") -> None:
        try:
            if instance is not None:
                instance.report_runless_asset_event(raw_batch_materialization(settings, batch))
        finally:
            if then is not None:
                then(batch)

    return report


def ingest_continuously(
    spark: SparkResource,
    settings: Settings,
    *,
    stop: threading.Event,
    processing_time: str = "5 seconds",
    on_batch: Callable[["BatchReport"], None] | None = None,
    instance: dg.DagsterInstance | None = None,
) -> "IngestResult":
    """Continuous ingestion inside a Dagster step until ``stop`` is set (the batch in flight
    commits first).

    With ``instance`` (a step's ``context.instance``), each micro-batch that moved rows is
    recorded there as a raw_events materialization before ``on_batch`` sees it, exactly as
    ``kinesis-lake stream`` records it in $DAGSTER_HOME's instance.
    """
    from kinesis_lake.pipeline.ingest import run_continuous  # PySpark: only when a step runs

    preflight(settings, event_schema=False)
    return run_continuous(
        spark.session,
        settings,
        stop=stop,
        processing_time=processing_time,
        on_batch=raw_batch_reporter(settings, instance, then=on_batch),
    )


DERIVED_AUTOMATION = (
    dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()
).with_label("eager_unless_blocked")
"""Follow raw automatically (eager already waits while raw or this asset is in progress),
but never over raw data a blocking check (duplicates) rejected."""

_DERIVED_COMMON: dict[str, Any] = {
    "group_name": DERIVED_GROUP,
    "kinds": {"spark", "iceberg"},
    "owners": OWNERS,
    "automation_condition": DERIVED_AUTOMATION,
}


def _declared_table_description(table: TableDeclaration, path: str) -> str:
    conditions = table.route.conditions
    takes = (
        "every raw record"
        if not conditions
        else "raw records where " + " and ".join(c.describe() for c in conditions)
    )
    dedup = f", deduplicated on {table.schema.event_key} per day" if table.schema.event_key else ""
    lead = f"{table.description} " if table.description else ""
    return f"{lead}Declared in {path}: {takes}, parsed against its fields{dedup}."


def _shown_path(path: Path | None) -> str:
    """The declaration file as the repository names it, when it is inside it."""
    if path is None:
        return "the declaration"
    root = Path(__file__).resolve().parents[2]
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(path)


def _derived_table_description(spec: DerivedTable, path: str) -> str:
    lead = f"{spec.description} " if spec.description else ""
    if spec.upsert is not None:
        deletes = (
            f"; a row whose {spec.upsert.delete.field} is {' or '.join(spec.upsert.delete.values)} "
            f"deletes its key (kept in {spec.tombstones})"
            if spec.upsert.delete
            else ""
        )
        what = (
            f"the current row of every {spec.upsert.key} in {spec.source}, the highest "
            f"{spec.upsert.version} winning in any arrival order{deletes}"
        )
    else:
        what = f"Spark SQL over {', '.join(spec.inputs)}, refreshed {_REFRESH_WORDS[spec.refresh]}"
    return f"{lead}Declared in {path}: {what}."


_REFRESH_WORDS = {
    "rows": "row by row (the SQL runs over new rows only)",
    "windowed": "by window (only the windows new rows fall in are recomputed)",
    "full": "in full whenever an input changed",
}


def _routed_schema(declaration: LakeDeclaration, name: str) -> Schema:
    """The columns of a routed table, or of the upsert table built from one."""
    for spec in declaration.derived:
        if spec.name == name and spec.upsert is not None:
            return _routed_schema(declaration, spec.source)
    return parsed_table_schema(declaration.table(name).schema)


def _derived_table_spec(
    declaration: LakeDeclaration, spec: DerivedTable, namespace: str
) -> dg.AssetSpec:
    metadata: dict[str, Any] = {"dagster/table_name": f"{namespace}.{spec.name}"}
    if spec.upsert is not None:  # a SQL table's columns are known once its query ran
        metadata["dagster/column_schema"] = table_column_schema(
            _routed_schema(declaration, spec.source)
        )
    return dg.AssetSpec(
        dg.AssetKey(spec.name),
        deps=[dg.AssetKey(name) for name in spec.inputs],
        description=_derived_table_description(spec, _shown_path(declaration.path)),
        metadata=metadata,
        **_DERIVED_COMMON,
    )


def derived_specs(
    declaration: LakeDeclaration, namespace: str, streams: list[StreamKeys]
) -> list[dg.AssetSpec]:
    """One asset per declared table, the quarantine, the aggregate, then one per
    ``derived:`` table."""
    raw_of = {keys.stream: keys.raw_asset for keys in streams}
    path = _shown_path(declaration.path)
    specs = [
        dg.AssetSpec(
            dg.AssetKey(table.name),
            deps=[raw_of[table.stream]],
            description=_declared_table_description(table, path),
            metadata={
                "dagster/table_name": f"{namespace}.{table.name}",
                "dagster/column_schema": table_column_schema(parsed_table_schema(table.schema)),
            },
            **_DERIVED_COMMON,
        )
        for table in declaration.tables
    ]
    return [
        *specs,
        dg.AssetSpec(
            EVENTS_QUARANTINE,
            deps=[keys.raw_asset for keys in streams],
            description=(
                "Raw records no declared table could take, with payload bytes and the reason: "
                "undecodable, no route, rejected by a table's schema (target_table names it), "
                "or a repeated key. Nothing is dropped; fix the producer or the declaration "
                "and the payloads are here to load again."
            ),
            metadata={
                "dagster/table_name": f"{namespace}.{QUARANTINE_TABLE}",
                "dagster/column_schema": table_column_schema(quarantine_table_schema()),
            },
            **_DERIVED_COMMON,
        ),
        dg.AssetSpec(
            EVENT_COUNTS_PER_MINUTE,
            deps=[dg.AssetKey(declaration.aggregate_source)],
            description=(
                f"Rows of {declaration.aggregate_source} counted per minute of event time and "
                "event type; only the windows new rows fall in are recomputed."
            ),
            metadata={
                "dagster/table_name": f"{namespace}.{AGGREGATE_TABLE}",
                "dagster/column_schema": table_column_schema(aggregate_table_schema()),
            },
            **_DERIVED_COMMON,
        ),
        *(_derived_table_spec(declaration, spec, namespace) for spec in declaration.derived),
    ]


def derived_tables_asset(
    declaration: LakeDeclaration, namespace: str, streams: list[StreamKeys]
) -> dg.AssetsDefinition:
    """The declared tables, quarantine and aggregate, refreshed together: one routing pass
    over the raw files appended since the last refresh feeds them all."""

    specs = derived_specs(declaration, namespace, streams)

    @dg.multi_asset(
        name="derived_tables",
        specs=specs,
        pool=DERIVE_POOL,
        description=(
            "One incremental refresh of the derived tables: the raw files appended since the "
            "last refresh are routed and parsed once on the executors and written to every "
            "declared table and the quarantine, then the touched aggregate windows are "
            "recomputed, then the upsert and SQL tables follow in declared order."
        ),
    )
    def derived_tables(
        context: dg.AssetExecutionContext, settings: PipelineSettingsResource, spark: SparkResource
    ) -> Iterator[dg.MaterializeResult]:
        lake = settings.settings()
        check_event_schema(lake)
        session = spark.session
        catalog = open_lake(lake)
        reported: set[str] = set()
        for name, refresh, numbers, seconds in _refresh_as_commits_land(session, lake):
            reported.add(name)
            yield _as_result(refresh_materialization(catalog, name, refresh, seconds, numbers))
        # A table with nothing new committed nothing; the step still owes it an output
        # (its checks run on it), which says so.
        for name in [spec.key.to_user_string() for spec in specs]:
            if name not in reported:
                identifier = lake.table_identifier(name)
                yield dg.MaterializeResult(
                    asset_key=dg.AssetKey(name),
                    metadata={
                        **table_metadata(identifier, catalog.load_table(identifier)),
                        "rows_added": 0,
                        "committed": False,
                    },
                )

    return derived_tables


def _as_result(materialization: dg.AssetMaterialization) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        asset_key=materialization.asset_key, metadata=materialization.metadata
    )


_DONE = object()


def _refresh_as_commits_land(
    session: Any, lake: Settings
) -> Iterator[tuple[str, "TableRefresh", dict[str, int], float]]:
    """Run one downstream refresh in a thread and hand out each table's commit as it lands
    (name, refresh, its numbers, seconds since the previous commit), so a step yields it
    then."""
    from kinesis_lake.pipeline.derive import refresh_downstream  # PySpark: only in a step
    from kinesis_lake.pipeline.session_thread import session_thread

    commits: queue.Queue[Any] = queue.Queue()
    outcome: dict[str, Any] = {}
    last = [time.monotonic()]

    def on_commit(name: str, refresh: "TableRefresh", numbers: dict[str, int]) -> None:
        now = time.monotonic()
        commits.put((name, refresh, numbers, now - last[0]))
        last[0] = now

    def work() -> None:
        try:
            outcome["result"] = refresh_downstream(session, lake, on_commit=on_commit)
        except BaseException as error:  # re-raised in the step's thread
            outcome["error"] = error
        finally:
            commits.put(_DONE)

    worker = session_thread(session, work, "downstream-refresh")
    worker.start()
    while (item := commits.get()) is not _DONE:
        yield item
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    result: DeriveResult = outcome["result"]
    logger = dg.get_dagster_logger()
    written = ", ".join(f"{r.rows_written} to {n}" for n, r in result.tables.items())
    logger.info(
        f"Wrote {written}, quarantined {result.quarantine.rows_written}, recomputed "
        f"{result.windows_recomputed} aggregate windows"
    )
