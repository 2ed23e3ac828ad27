"""Each stream's raw table as a Dagster asset, and continuous ingestion's record of it.

The stream it is ingested from, an external asset, is in :mod:`kinesis_lake.defs.streams`;
the tables derived from it in :mod:`kinesis_lake.defs.derived_assets`. The asset only
starts ``kinesis_lake.pipeline.ingest`` and reports what it did. Metadata keys are stable
(dashboards, the CLI and the README refer to them) and numeric where the UI should plot them.

Who runs it: the backlog sensor (``sensors.py``), only when the stream holds records past
the committed positions; one at a time per stream (pool ``kinesis_lake_ingestion``,
``kinesis_lake_ingestion_<raw table>`` for each declared stream; limit 1 in
``dagster.yaml``), because one Spark checkpoint admits one query. Such a run records each
committed micro-batch as a raw_events materialization as it lands and brings the
downstream tables along after each (``follow.py``); with ``KINESIS_LAKE_RUN_LINGER_SECONDS``
it goes on while records keep arriving. A run that plans the downstream tables or raw's
checks itself (materialize all in the UI) reports one total and leaves them to its steps.
For low latency,
``kinesis-lake stream`` (or ``ingest_continuously`` in a step of your own) runs the same query
continuously instead (stop the backlog sensor meanwhile: the sensor does not know about
it) and records each micro-batch as a runless raw_events materialization with the same
metadata keys (``raw_batch_materialization``).

Invariant: a raw table's materializations carry the same metadata keys whether a run, a
lingering run or a stream made them (``rows_added``, ``dagster/row_count``, lag,
``skipped_ranges``), so the asset's plots run on across all three and the data-loss
check reads whichever came last.
"""

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import dagster as dg

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource, SparkResource
from kinesis_lake.defs.streams import DEFAULT_STREAM, INGESTION_GROUP, OWNERS, StreamKeys
from kinesis_lake.defs.tables import rate, shown_seconds, table_column_schema, table_metadata
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.preflight import check_event_schema, preflight

if TYPE_CHECKING:
    # Type only: loading the definitions must not import PySpark.
    from kinesis_lake.pipeline.ingest_report import BatchReport, IngestResult

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
        # An ingestion run records each commit as it lands and nothing more at its end.
        output_required=False,
        description=(
            "Every Kinesis user record exactly once, payload bytes untouched. A run drains "
            "what the stream holds when it starts (Spark availableNow; with "
            "KINESIS_LAKE_RUN_LINGER_SECONDS it goes on while records keep arriving) and "
            "commits each micro-batch with its shard positions; replays are skipped by batch "
            "id. The ingestion job's run records each commit as a materialization as it "
            "lands, checks it and brings the downstream tables along after each."
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
        if _ingestion_run(context, keys):
            # The ingestion job's run (lingering or not): each commit is a materialization
            # as it lands (one per commit: the run adds no total of its own at the end), and
            # the downstream tables follow each (defs/follow.py), checks first.
            _ingest_and_follow(
                context, lake, keys, spark, {"settings": settings, "kinesis": kinesis}
            )
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
            "seconds": shown_seconds(result.seconds),
            "rows_per_second": rate(result.rows, result.seconds),
            "shards_read": result.shards_read,
            "skipped_ranges": result.skipped_ranges,
            **_lag_metadata(result.max_millis_behind_latest, result.millis_behind_latest),
        }
        if result.snapshot_id is not None:
            metadata["snapshot_id"] = int(result.snapshot_id)
        yield dg.MaterializeResult(metadata=metadata)
        # Resumed once Dagster stored the materialization: checks the run did not plan
        # (the ingestion job plans none) judge it now, dated now (``check_verdicts.py``).
        _check_the_commit(context, keys, {"settings": settings, "kinesis": kinesis})

    return raw


def _check_the_commit(
    context: dg.AssetExecutionContext, keys: StreamKeys, resources: dict[str, Any]
) -> None:
    from kinesis_lake.defs.check_verdicts import evaluate_check, planned_checks, record_verdicts
    from kinesis_lake.defs.raw_checks import raw_checks

    planned = planned_checks(context)
    unplanned = [check for check in raw_checks(keys) if check.check_key not in planned]
    verdicts = [evaluate_check(check, resources, context.instance) for check in unplanned]
    record_verdicts(verdicts, context.instance)


def _ingestion_run(context: dg.AssetExecutionContext, keys: StreamKeys) -> bool:
    """Whether this run plans raw and nothing after it (the ingestion job's, launched by
    the backlog sensor): no downstream asset and none of raw's checks. Such a run brings
    the downstream tables along itself; one that plans them (materialize all, the full
    job) leaves them to its own steps."""
    from kinesis_lake.defs.check_verdicts import planned_checks

    graph = context.job_def.asset_layer.asset_graph
    assets = context.run.asset_selection or graph.executable_asset_keys
    raws_checks = {check for check in planned_checks(context) if check.asset_key == keys.raw_asset}
    return set(assets) <= {keys.stream_asset, keys.raw_asset} and not raws_checks


def _ingest_and_follow(
    context: dg.AssetExecutionContext,
    lake: Settings,
    keys: StreamKeys,
    spark: SparkResource,
    check_resources: dict[str, Any],
) -> None:
    """Ingest, recording each commit, with the downstream follower beside."""
    from kinesis_lake.defs.follow import DownstreamFollower  # it imports the checks
    from kinesis_lake.pipeline.ingest import run_ingestion

    session = spark.session
    follower: DownstreamFollower | None = None
    try:
        check_event_schema(lake)
        follower = DownstreamFollower(context, lake, keys, session, check_resources).start()
    except Exception as error:  # ingestion goes on, and its commits are still checked
        context.log.error(
            f"The downstream tables will not follow this run: {error} Fix that, then they "
            "follow the next run (or the automation derives once raw's checks passed)."
        )

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
    if follower is None and result.batches:
        _check_the_commit(context, keys, check_resources)
    context.log.info(
        f"Ingested {result.rows} rows in {result.batches} commits from {result.shards_read} "
        f"shards in {result.seconds:.0f} s (lingering included, if any); skipped ranges: "
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
        **_committed_table_metadata(settings, batch),
        "dagster/row_count": batch.raw_rows_total,
        "rows_added": batch.rows,
        "batch_id": batch.batch_id,
        "seconds": shown_seconds(batch.seconds),
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


def _committed_table_metadata(settings: Settings, batch: "BatchReport") -> dict[str, Any]:
    """The table as the batch's commit left it: its columns (the asset page's schema) and
    data files, from that snapshot's summary (a later batch may have committed since).

    Display only: a catalog that cannot be read at this moment leaves them out, not the
    commit's materialization (the next one shows them)."""
    shown: dict[str, Any] = {"dagster/table_name": settings.raw_table}
    try:
        table = open_lake(settings).load_table(settings.raw_table)
    except Exception:
        return shown
    snapshot = table.snapshot_by_id(batch.snapshot_id) if batch.snapshot_id is not None else None
    summary = snapshot.summary if snapshot is not None else None
    files = int(summary.get("total-data-files", 0)) if summary is not None else 0
    return {
        **shown,
        "dagster/column_schema": table_column_schema(table.schema()),
        "data_files": files,
    }


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
