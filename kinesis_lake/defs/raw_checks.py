"""The checks of one stream's raw table: is every record there exactly once, and is
ingestion keeping up?

One function per check, so each reads alone; :func:`raw_checks` lists them. The UI, the
sensor and the tests know the checks by the names below: they stay as they are.
"""

from typing import Any

import dagster as dg
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.defs.backlog_runs import backlog_history, backlog_run_key
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource
from kinesis_lake.defs.streams import StreamKeys, freshness_outcome, measure_freshness
from kinesis_lake.defs.table_checks import missing_table
from kinesis_lake.pipeline.data_loss import loss_report
from kinesis_lake.pipeline.lake import load_table, open_lake
from kinesis_lake.pipeline.reconcile import raw_duplicates, raw_position_reconciliation

FRESHNESS_CHECK = "fresh_relative_to_stream"
STALL_CHECK = "ingestion_advances"
DUPLICATES_CHECK = "no_duplicate_records"
POSITIONS_CHECK = "matches_committed_positions"
DATA_LOSS_CHECK = "no_data_loss"


def _raw_table(lake: Settings) -> Table | None:
    return load_table(open_lake(lake), lake.raw_table)


def freshness_check(keys: StreamKeys) -> dg.AssetChecksDefinition:
    """Judged against the stream, not the clock: a table no record is waiting for is
    fresh however old its last commit."""

    @dg.asset_check(
        asset=keys.raw_asset,
        name=FRESHNESS_CHECK,
        description=(
            "Stale only when the stream holds unconsumed records older than "
            "KINESIS_LAKE_FRESHNESS_MINUTES: a quiet stream never makes the table stale. Also "
            "evaluated by the backlog sensor each time it records the stream's state."
        ),
    )
    def fresh(settings: PipelineSettingsResource, kinesis: KinesisResource) -> dg.AssetCheckResult:
        passed, metadata, description = freshness_outcome(
            measure_freshness(keys.lake(settings, kinesis), kinesis)
        )
        return dg.AssetCheckResult(passed=passed, metadata=metadata, description=description)

    return fresh


def stall_check(keys: StreamKeys) -> dg.AssetChecksDefinition:
    """A backlog the sensor's runs keep failing to move is an error with a reason, not
    only a table growing stale."""

    @dg.asset_check(
        asset=keys.raw_asset,
        name=STALL_CHECK,
        description=(
            "Fails when a run the backlog sensor launched finished (failed, or succeeded "
            "without committing) while the stream still holds records past the committed "
            "positions: ingestion is stuck and says why. Also evaluated by the backlog sensor "
            "whenever the verdict changes; the sensor keeps retrying with back-off."
        ),
    )
    def ingestion_advances(
        context: dg.AssetCheckExecutionContext,
        settings: PipelineSettingsResource,
        kinesis: KinesisResource,
    ) -> dg.AssetCheckResult:
        lake = keys.lake(settings, kinesis)
        fresh = measure_freshness(lake, kinesis)
        base = backlog_run_key(lake.stream_name, fresh.positions)
        history = backlog_history(context.instance, base, keys.sensor_name)
        stall = history.stall(fresh.probe.shards_with_backlog)
        return dg.AssetCheckResult(
            passed=stall is None,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"shards_with_backlog": len(fresh.probe.shards_with_backlog)},
            description=stall or "No run launched for the current backlog has finished without it.",
        )

    return ingestion_advances


def duplicates_check(keys: StreamKeys) -> dg.AssetChecksDefinition:
    """The exactly-once guarantee itself. Blocking: the derived tables would otherwise
    carry the duplicates into every downstream count."""

    @dg.asset_check(
        asset=keys.raw_asset,
        name=DUPLICATES_CHECK,
        blocking=True,
        description=(
            "Each (stream_name, shard_id, sequence_number, sub_sequence_number) at most once: "
            "the exactly-once guarantee itself. Blocking: derived tables wait for a fix."
        ),
    )
    def no_duplicates(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = keys.lake(settings)
        raw = _raw_table(lake)
        if raw is None:
            return missing_table(keys.raw_asset, DUPLICATES_CHECK, lake.raw_table)
        report = raw_duplicates(raw)
        return dg.AssetCheckResult(
            passed=report.passed,
            metadata={
                "rows": report.rows,
                "duplicate_keys": report.duplicate_keys,
                "extra_rows": report.extra_rows,
            },
            description=(
                "No Kinesis record is stored twice."
                if report.passed
                else f"{report.duplicate_keys} records stored more than once "
                f"({report.extra_rows} extra rows), e.g. {', '.join(report.examples)}."
            ),
        )

    return no_duplicates


def positions_check(keys: StreamKeys) -> dg.AssetChecksDefinition:
    """The positions the sink commits are where the next run resumes: rows beyond them
    would be read again, committed records missing from the table are lost."""

    @dg.asset_check(
        asset=keys.raw_asset,
        name=POSITIONS_CHECK,
        description=(
            "Per shard, the highest sequence number in the table equals the position the sink "
            "committed with it (table property kinesis-lake.positions): no rows beyond what "
            "was committed, no committed records missing."
        ),
    )
    def match_positions(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = keys.lake(settings)
        raw = _raw_table(lake)
        if raw is None:
            return missing_table(keys.raw_asset, POSITIONS_CHECK, lake.raw_table)
        report = raw_position_reconciliation(raw)
        metadata: dict[str, Any] = {
            "rows": report.rows,
            "shards_in_table": len(report.table_max),
            "shards_committed": len(report.committed),
            "mismatched_shards": len(report.mismatched),
            "committed_positions": dg.MetadataValue.json(report.committed),
        }
        if report.passed:
            description = f"{len(report.committed)} shards: table and committed positions agree."
        else:
            details = "; ".join(
                f"{shard}: table max {in_table or 'none'}, committed {position or 'none'}"
                for shard, (in_table, position) in list(report.mismatched.items())[:5]
            )
            description = f"Table rows and committed positions disagree: {details}."
        return dg.AssetCheckResult(passed=report.passed, metadata=metadata, description=description)

    return match_positions


def _data_loss_description(keys: StreamKeys, new: int, acknowledged: int) -> str:
    """One line: no loss, or how many ranges were lost and what the operator does."""
    if new == 0:
        before = f" ({acknowledged} skipped ranges acknowledged before)" if acknowledged else ""
        return f"No data loss reported by the source{before}."
    stream = f" --stream {keys.stream}" if keys.declared else ""
    return (
        f"The source skipped {new} ranges of records that expired before they were read "
        "(they are lost): re-send them from their producer if you can, then run "
        f"kinesis-lake acknowledge-loss{stream} to clear this check; ingest more often than "
        "the retention, or raise it."
    )


def data_loss_check(keys: StreamKeys) -> dg.AssetChecksDefinition:
    """Records that expired before they were read are gone from the stream: only the
    source's count of skipped ranges can tell, and only an operator can clear it."""

    @dg.asset_check(
        asset=keys.raw_asset,
        name=DATA_LOSS_CHECK,
        description=(
            "The Kinesis source reported no skipped ranges (records that expired from the "
            f"stream before they were read) in the latest {keys.raw_table} materialization, "
            "beyond those an operator acknowledged (kinesis-lake acknowledge-loss)."
        ),
    )
    def no_data_loss(
        context: dg.AssetCheckExecutionContext, settings: PipelineSettingsResource
    ) -> dg.AssetCheckResult:
        records = context.instance.fetch_materializations(keys.raw_asset, limit=1).records
        materialization = records[0].asset_materialization if records else None
        entry = materialization.metadata.get("skipped_ranges") if materialization else None
        skipped = int(entry.value) if entry is not None else 0
        # The count is the checkpoint's running total: only skips since the operator's
        # last acknowledgment (of this checkpoint) are news, or one loss dealt with would
        # keep the check red until the checkpoint is deleted.
        acknowledged = min(skipped, loss_report(keys.lake(settings)).acknowledged)
        new = skipped - acknowledged
        return dg.AssetCheckResult(
            passed=new == 0,
            metadata={"skipped_ranges": skipped, "acknowledged_ranges": acknowledged},
            description=_data_loss_description(keys, new, acknowledged),
        )

    return no_data_loss


def raw_checks(keys: StreamKeys) -> list[dg.AssetChecksDefinition]:
    """The checks of one stream's raw table."""
    return [
        stall_check(keys),
        freshness_check(keys),
        duplicates_check(keys),
        positions_check(keys),
        data_loss_check(keys),
    ]
