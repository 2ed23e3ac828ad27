"""Jobs and schedules: the named ways to run the assets.

* ``ingest_<raw table>`` (``ingest_raw_events``): a stream's raw table, which checks each
  commit and brings the downstream tables along; what the stream's backlog sensor launches.
* ``kinesis_lake_full``: every asset (ingest, derive) and every check, in dependency
  order; for a manual "bring everything up to date" run.
* ``iceberg_maintenance`` (``maintenance.py``): upkeep of every table, on a schedule
  (hourly unless KINESIS_LAKE_MAINTENANCE_CRON says otherwise): a streaming writer's
  snapshot history must be expired routinely, or commits slow down.
* ``replay_quarantine``: after a fix of the declaration, move the quarantined records it
  now takes into their tables (``kinesis_lake.pipeline.replay``); launched by hand.
"""

from typing import TYPE_CHECKING, Any

import dagster as dg

if TYPE_CHECKING:  # the type define_asset_job returns; dagster does not export it
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

from kinesis_lake.defs.resources import PipelineSettingsResource, SparkResource
from kinesis_lake.defs.streams import DEFAULT_STREAM, StreamKeys
from kinesis_lake.defs.tables import (
    DERIVE_POOL,
    EVENT_COUNTS_PER_MINUTE,
    EVENTS_QUARANTINE,
    table_metadata,
)

FULL_JOB_NAME = "kinesis_lake_full"
REPLAY_JOB_NAME = "replay_quarantine"

RUN_NAME_TAG = "kinesis_lake/run"
DERIVE_RUN_NAME = "refresh_derived_tables"
"""What the runs the automation sensor launches are called, as a tag. Declarative
automation requests assets, not a job, so Dagster lists those runs under its hidden
``__ASSET_JOB``; the tag names them in the Runs list, where it also filters them."""


def ingest_job_for(keys: StreamKeys, *, lingering: bool = False) -> "UnresolvedAssetJobDefinition":
    """What a stream's backlog sensor launches: an observation of the stream and its raw
    table, which brings the downstream tables along after each commit (``defs/follow.py``).

    The run evaluates the checks itself, after the commits they judge
    (``defs/check_verdicts.py``): as steps of the run they would be planned, and dated,
    when it starts, before the commits (a lingering run's by minutes, and skipped, since
    such a run ends without a result of its own)."""
    drains = "while records keep arriving" if lingering else "until its backlog is drained"
    return dg.define_asset_job(
        keys.ingest_job_name,
        selection=dg.AssetSelection.assets(keys.stream_asset, keys.raw_asset).without_checks(),
        description=(
            f"Observe the stream and drain it into {keys.raw_table} {drains}; after each "
            "commit, check it and bring the downstream tables along."
        ),
    )


ingest_job = ingest_job_for(DEFAULT_STREAM)

full_job = dg.define_asset_job(
    FULL_JOB_NAME,
    selection=dg.AssetSelection.all() - dg.AssetSelection.kind("kinesis"),
    description="Every asset and check: ingest, then derive (upkeep is iceberg_maintenance).",
)


@dg.op(
    pool=DERIVE_POOL,  # it writes the derived tables: never beside a refresh
    out={},  # it reports materializations only; a generator op has no "result" to yield
    description=(
        "Route and parse every unresolved quarantined record again with the declaration as "
        "it is now; append the ones it takes to their tables and mark them resolved."
    ),
)
def replay_quarantined_records(
    context: dg.OpExecutionContext, settings: PipelineSettingsResource, spark: SparkResource
):
    from kinesis_lake.pipeline.lake import open_lake
    from kinesis_lake.pipeline.preflight import check_event_schema
    from kinesis_lake.pipeline.replay import replay_quarantine  # PySpark: only when it runs

    lake = settings.settings()
    check_event_schema(lake)
    result = replay_quarantine(spark.session, lake)
    context.log.info(
        f"Replayed {result.candidates} quarantined records: {result.resolved} resolved, "
        f"{result.still_quarantined} still quarantined; written {result.written}, "
        f"caught up from raw first {result.caught_up}"
    )
    catalog = open_lake(lake)
    for name in result.written.keys() | result.caught_up.keys():
        replayed, caught_up = result.written.get(name, 0), result.caught_up.get(name, 0)
        if not replayed and not caught_up:
            continue
        identifier = lake.table_identifier(name)
        yield dg.AssetMaterialization(
            asset_key=name,
            description=(
                f"Quarantine replay added {replayed} rows, after {caught_up} rows from raw "
                "that no refresh had written yet (a new table's backfill, or raw's newest)."
            ),
            metadata={
                **table_metadata(identifier, catalog.load_table(identifier)),
                "rows_added": replayed + caught_up,
                "replayed_rows": replayed,
                "caught_up_rows": caught_up,
            },
        )
    yield dg.AssetMaterialization(
        asset_key=EVENTS_QUARANTINE,
        description=f"Quarantine replay resolved {result.resolved} records.",
        metadata={
            "replay_candidates": result.candidates,
            "replay_resolved": result.resolved,
            "still_quarantined": result.still_quarantined,
        },
    )
    if result.windows_recomputed:
        yield dg.AssetMaterialization(
            asset_key=EVENT_COUNTS_PER_MINUTE,
            metadata={"windows_recomputed": result.windows_recomputed},
        )


@dg.job(
    name=REPLAY_JOB_NAME,
    description=(
        "After fixing the declaration file: move the quarantined records it now takes into "
        "their tables, exactly once (kinesis-lake replay does the same)."
    ),
)
def replay_job() -> None:
    replay_quarantined_records()


def lake_jobs(
    streams: list[StreamKeys], maintenance: dg.JobDefinition, *, lingering: bool = False
) -> dict[str, Any]:
    """Every job by name: an ingest job per stream, and the lake's own."""
    jobs: list[Any] = [
        *(ingest_job_for(keys, lingering=lingering) for keys in streams),
        full_job,
        maintenance,
        replay_job,
    ]
    return {job.name: job for job in jobs}
