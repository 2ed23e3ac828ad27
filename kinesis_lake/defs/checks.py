"""Asset checks: is every record in the lake exactly once, and is the lake keeping up?

Each check is its own ``@dg.asset_check`` (not a ``check_specs`` entry on the asset): an
asset must return a result for every spec it declares, and these checks are better run,
re-run and scheduled on their own. The numbers come from :mod:`kinesis_lake.pipeline.reconcile`;
here they only become verdicts, severities and metadata (numeric, so the UI plots them).

Blocking: ``raw_events`` duplicates block the derived tables, which would otherwise
carry the duplicates into every downstream count.
"""

import json
from typing import Any

import dagster as dg
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.defs.assets import EVENT_COUNTS_PER_MINUTE, EVENTS_QUARANTINE
from kinesis_lake.defs.backlog_runs import backlog_history, backlog_run_key
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource
from kinesis_lake.defs.streams import StreamKeys, freshness_outcome, measure_freshness
from kinesis_lake.errors import SnapshotExpiredError
from kinesis_lake.events.declaration import (
    QUARANTINE_TABLE,
    LakeDeclaration,
    TableDeclaration,
    load_declaration,
)
from kinesis_lake.events.derived_tables import DerivedTable
from kinesis_lake.pipeline.data_loss import loss_report
from kinesis_lake.pipeline.derived_reconciliation import (
    SAMPLED_HISTORY_ROWS,
    reconcile_upsert,
    reconcile_windows,
    sql_table_caught_up,
)
from kinesis_lake.pipeline.lake import load_table, open_lake
from kinesis_lake.pipeline.reconcile import (
    DerivedReconciliation,
    compare_table_schema,
    quarantine_ratio,
    raw_duplicates,
    raw_position_reconciliation,
    reconcile_aggregate,
    reconcile_derived,
)

FRESHNESS_CHECK = "fresh_relative_to_stream"
STALL_CHECK = "ingestion_advances"
DUPLICATES_CHECK = "no_duplicate_records"
POSITIONS_CHECK = "matches_committed_positions"
DATA_LOSS_CHECK = "no_data_loss"
RECONCILIATION_CHECK = "reconciles_with_raw"
SCHEMA_CHECK = "schema_matches_declared"
QUARANTINE_CHECK = "quarantine_ratio"
AGGREGATE_CHECK = "sums_match_events"
UNIQUE_KEYS_CHECK = "one_row_per_key"
RECOMPUTATION_CHECK = "matches_recomputation"
WINDOWS_CHECK = "windows_match_input"
CAUGHT_UP_CHECK = "caught_up_with_inputs"


def _missing_table(asset: dg.AssetKey, check: str, identifier: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name=check,
        passed=False,
        description=f"Table {identifier} does not exist yet: materialize {asset.to_user_string()}.",
    )


def _tables(settings: Settings, *attributes: str):
    catalog = open_lake(settings)
    return [load_table(catalog, getattr(settings, name)) for name in attributes]


# ---- raw_events ---------------------------------------------------------------------------


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


def raw_checks(keys: StreamKeys) -> list[dg.AssetChecksDefinition]:
    """The checks of one stream's raw table."""
    raw_asset = keys.raw_asset
    table = keys.raw_table

    @dg.asset_check(
        asset=raw_asset,
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

    @dg.asset_check(
        asset=raw_asset,
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

    @dg.asset_check(
        asset=raw_asset,
        name=DUPLICATES_CHECK,
        blocking=True,
        description=(
            "Each (stream_name, shard_id, sequence_number, sub_sequence_number) at most once: "
            "the exactly-once guarantee itself. Blocking: derived tables wait for a fix."
        ),
    )
    def no_duplicates(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = keys.lake(settings)
        (raw,) = _tables(lake, "raw_table")
        if raw is None:
            return _missing_table(raw_asset, DUPLICATES_CHECK, lake.raw_table)
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

    @dg.asset_check(
        asset=raw_asset,
        name=POSITIONS_CHECK,
        description=(
            "Per shard, the highest sequence number in the table equals the position the sink "
            "committed with it (table property kinesis-lake.positions): no rows beyond what "
            "was committed, no committed records missing."
        ),
    )
    def match_positions(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = keys.lake(settings)
        (raw,) = _tables(lake, "raw_table")
        if raw is None:
            return _missing_table(raw_asset, POSITIONS_CHECK, lake.raw_table)
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

    @dg.asset_check(
        asset=raw_asset,
        name=DATA_LOSS_CHECK,
        description=(
            "The Kinesis source reported no skipped ranges (records that expired from the "
            f"stream before they were read) in the latest {table} materialization, beyond "
            "those an operator acknowledged (kinesis-lake acknowledge-loss)."
        ),
    )
    def no_data_loss(
        context: dg.AssetCheckExecutionContext, settings: PipelineSettingsResource
    ) -> dg.AssetCheckResult:
        records = context.instance.fetch_materializations(raw_asset, limit=1).records
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

    return [ingestion_advances, fresh, no_duplicates, match_positions, no_data_loss]


# ---- derived tables -----------------------------------------------------------------------


def _reconciliation_description(report: DerivedReconciliation) -> str:
    routed = " + ".join(f"{rows} {name}" for name, rows in report.routed.items())
    if report.out_of_step:
        return (
            f"{', '.join(report.out_of_step)} caught up to another raw snapshot than the "
            "rest: a refresh was interrupted between commits; materialize the derived "
            "tables again to finish it."
        )
    if report.source_snapshot_id is None:
        return "The derived tables have not processed any raw rows yet."
    if report.passed:
        return (
            f"All {report.raw_processed} raw rows accounted for: {routed} routed rows + "
            f"{report.quarantined} quarantined."
        )
    hint = (
        " A table declared since takes records quarantined before it existed: run "
        "kinesis-lake replay (or the replay_quarantine job) to resolve them."
        if report.repeated
        else ""
    )
    return (
        f"Of {report.raw_processed} raw rows processed, {report.missing} are in no table "
        f"and not quarantined, {report.repeated} are written twice for one table, and "
        f"{report.unexpected} derived rows match no raw row (e.g. "
        f"{', '.join(report.examples) or 'n/a'}).{hint}"
    )


def _reconciliation_check(
    declaration: LakeDeclaration, keys: StreamKeys
) -> dg.AssetChecksDefinition:
    part = declaration.for_stream(keys.stream)
    only = part.tables[0] if len(part.tables) == 1 and not declaration.streams else None
    routes_everything = only is not None and not only.route.conditions
    name = RECONCILIATION_CHECK if not keys.declared else f"reconciles_with_{keys.raw_table}"

    @dg.asset_check(
        asset=EVENTS_QUARANTINE,
        name=name,
        description=(
            f"Every {keys.raw_table} row the derived tables processed is accounted for exactly "
            "once: in each declared table whose route takes it (or quarantined for that "
            "table), or else once in quarantine. Nothing dropped, nothing doubled."
        ),
    )
    def quarantine_reconciles_with_raw(
        settings: PipelineSettingsResource,
    ) -> dg.AssetCheckResult:
        lake = keys.lake(settings)
        catalog = open_lake(lake)
        names = [lake.raw_table_name, QUARANTINE_TABLE, *part.names]
        tables = {}
        for table_name in names:
            table = load_table(catalog, lake.table_identifier(table_name))
            if table is None:
                return _missing_table(EVENTS_QUARANTINE, name, lake.table_identifier(table_name))
            tables[table_name] = table
        raw, quarantine = tables.pop(lake.raw_table_name), tables.pop(QUARANTINE_TABLE)
        try:
            report = reconcile_derived(
                raw,
                tables,
                quarantine,
                routes_everything=routes_everything,
                stream_name=lake.stream_name if keys.declared else None,
            )
        except SnapshotExpiredError as error:
            return dg.AssetCheckResult(passed=False, description=str(error))
        metadata: dict[str, Any] = {
            "raw_processed": report.raw_processed,
            **{f"routed/{name}": rows for name, rows in report.routed.items()},
            "quarantined": report.quarantined,
            "missing": report.missing,
            "repeated": report.repeated,
            "unexpected": report.unexpected,
        }
        if report.source_snapshot_id is not None:
            metadata["source_snapshot_id"] = report.source_snapshot_id
        return dg.AssetCheckResult(
            passed=report.passed,
            metadata=metadata,
            description=_reconciliation_description(report),
        )

    return quarantine_reconciles_with_raw


def _schema_check(table: TableDeclaration) -> dg.AssetChecksDefinition:
    asset = dg.AssetKey(table.name)

    @dg.asset_check(
        asset=asset,
        name=SCHEMA_CHECK,
        description=(
            f"{table.name} has every column its declaration gives it, with the declared "
            "type. A column no longer declared only warns: Iceberg keeps it for old rows."
        ),
    )
    def schema_matches(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = settings.settings()
        identifier = lake.table_identifier(table.name)
        found = load_table(open_lake(lake), identifier)
        if found is None:
            return _missing_table(asset, SCHEMA_CHECK, identifier)
        # The file as it is now, as the next refresh will read it (the asset graph is the
        # file as it was when the code location loaded).
        current = load_declaration(lake.event_schema_path)
        if table.name not in current.names:
            return dg.AssetCheckResult(
                passed=False,
                description=(
                    f"{table.name} is no longer declared in {lake.event_schema_path}: reload "
                    "the code location to drop its asset, or declare it again."
                ),
            )
        report = compare_table_schema(found, current.table(table.name).schema)
        metadata = {
            "declared_columns": len(report.declared),
            "table_columns": len(report.actual),
            "missing_columns": len(report.missing),
            "extra_columns": len(report.extra),
            "mismatched_columns": len(report.mismatched),
        }
        problems = [
            *(f"missing {name}" for name in report.missing),
            *(
                f"{name} is {have}, declared {want}"
                for name, (have, want) in report.mismatched.items()
            ),
            *(f"{name} no longer declared" for name in report.extra),
        ]
        return dg.AssetCheckResult(
            passed=report.passed and not report.extra,
            severity=(
                dg.AssetCheckSeverity.ERROR if not report.passed else dg.AssetCheckSeverity.WARN
            ),
            metadata=metadata,
            description="; ".join(problems) or "Table schema matches the declaration.",
        )

    return schema_matches


def _quarantine_ratio_check(streams: list[StreamKeys]) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=EVENTS_QUARANTINE,
        name=QUARANTINE_CHECK,
        description=(
            "Quarantined rows over raw rows processed; warns above "
            "KINESIS_LAKE_QUARANTINE_WARN_RATIO (a producer or declaration change gone wrong)."
        ),
    )
    def events_quarantine_ratio(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = settings.settings()
        catalog = open_lake(lake)
        quarantine = load_table(catalog, lake.quarantine_table)
        raws = [load_table(catalog, keys.settings(lake).raw_table) for keys in streams]
        present = [raw for raw in raws if raw is not None]
        if quarantine is None or not present:
            return _missing_table(EVENTS_QUARANTINE, QUARANTINE_CHECK, lake.quarantine_table)
        try:
            report = quarantine_ratio(present, quarantine)
        except SnapshotExpiredError as error:
            return dg.AssetCheckResult(passed=False, description=str(error))
        passed = report.ratio <= lake.quarantine_warn_ratio
        return dg.AssetCheckResult(
            passed=passed,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "quarantined": report.quarantined,
                "raw_processed": report.raw_processed,
                "ratio": round(report.ratio, 6),
                "warn_ratio": lake.quarantine_warn_ratio,
            },
            description=(
                f"{report.quarantined} of {report.raw_processed} records quarantined "
                f"({report.ratio:.2%}; warns above {lake.quarantine_warn_ratio:.2%})."
            ),
        )

    return events_quarantine_ratio


def _aggregate_check(source_name: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=EVENT_COUNTS_PER_MINUTE,
        name=AGGREGATE_CHECK,
        description=(
            f"For every minute window, the summed counts equal the {source_name} rows whose "
            "event_timestamp falls in it (as of the snapshot the aggregate processed)."
        ),
    )
    def event_counts_match_events(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = settings.settings()
        catalog = open_lake(lake)
        source = load_table(catalog, lake.table_identifier(source_name))
        aggregate = load_table(catalog, lake.aggregate_table)
        if source is None or aggregate is None:
            return _missing_table(EVENT_COUNTS_PER_MINUTE, AGGREGATE_CHECK, lake.aggregate_table)
        try:
            report = reconcile_aggregate(source, aggregate)
        except SnapshotExpiredError as error:
            return dg.AssetCheckResult(passed=False, description=str(error))
        metadata: dict[str, Any] = {
            "windows": report.windows,
            "mismatched_windows": report.mismatched_windows,
            "parsed_rows": report.parsed_rows,
            "aggregate_sum": report.aggregate_sum,
        }
        if report.parsed_snapshot_id is not None:
            metadata["parsed_snapshot_id"] = report.parsed_snapshot_id
        return dg.AssetCheckResult(
            passed=report.passed,
            metadata=metadata,
            description=(
                f"{report.windows} windows, {report.aggregate_sum} events counted = "
                f"{source_name} rows."
                if report.passed
                else f"{report.mismatched_windows} of {report.windows} windows disagree: "
                + json.dumps(report.examples)
            ),
        )

    return event_counts_match_events


def _upsert_checks(spec: DerivedTable) -> list[dg.AssetChecksDefinition]:
    asset = dg.AssetKey(spec.name)
    upsert = spec.upsert
    assert upsert is not None

    def tables(lake: Settings) -> tuple[Table | None, Table | None]:
        catalog = open_lake(lake)
        return (
            load_table(catalog, lake.table_identifier(spec.source)),
            load_table(catalog, lake.table_identifier(spec.name)),
        )

    @dg.asset_check(
        asset=asset,
        name=UNIQUE_KEYS_CHECK,
        description=f"{spec.name} holds at most one row per {upsert.key}.",
    )
    def unique_keys(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = settings.settings()
        source, table = tables(lake)
        if source is None or table is None:
            return _missing_table(asset, UNIQUE_KEYS_CHECK, lake.table_identifier(spec.name))
        report = reconcile_upsert(spec, source, table)
        return dg.AssetCheckResult(
            passed=report.unique,
            metadata={"rows": report.rows, "distinct_keys": report.distinct_keys},
            description=f"{report.rows} rows, {report.distinct_keys} distinct {upsert.key}.",
        )

    @dg.asset_check(
        asset=asset,
        name=RECOMPUTATION_CHECK,
        description=(
            f"For every {upsert.key} (a hash sample of them past "
            f"{SAMPLED_HISTORY_ROWS:,} source rows), {spec.name} holds exactly the record a "
            f"recomputation over all of {spec.source} picks: same {upsert.version}, same "
            "Kinesis record, deleted keys absent."
        ),
    )
    def matches_recomputation(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = settings.settings()
        source, table = tables(lake)
        if source is None or table is None:
            return _missing_table(asset, RECOMPUTATION_CHECK, lake.table_identifier(spec.name))
        try:
            report = reconcile_upsert(spec, source, table)
        except SnapshotExpiredError as error:
            return dg.AssetCheckResult(passed=False, description=str(error))
        return dg.AssetCheckResult(
            passed=report.matches,
            metadata={
                "keys_compared": report.keys_compared,
                "sample_one_in": report.sample_one_in,
                "mismatched_keys": report.mismatched_keys,
            },
            description=(
                f"{report.keys_compared} keys compared (1 in {report.sample_one_in}): all match."
                if report.matches
                else f"{report.mismatched_keys} keys differ: " + json.dumps(report.examples)
            ),
        )

    return [unique_keys, matches_recomputation]


def _sql_check(spec: DerivedTable) -> dg.AssetChecksDefinition:
    asset = dg.AssetKey(spec.name)
    windowed = spec.window is not None
    name = WINDOWS_CHECK if windowed else CAUGHT_UP_CHECK

    @dg.asset_check(
        asset=asset,
        name=name,
        description=(
            f"{spec.name} has a row for exactly the {spec.window.size} windows of "
            f"{spec.source}'s {spec.window.column}, as the input is now."
            if spec.window is not None
            else f"{spec.name} has processed every row its inputs ({', '.join(spec.inputs)}) "
            "hold now."
        ),
    )
    def sql_table_check(settings: PipelineSettingsResource) -> dg.AssetCheckResult:
        lake = settings.settings()
        catalog = open_lake(lake)
        table = load_table(catalog, lake.table_identifier(spec.name))
        inputs = {n: load_table(catalog, lake.table_identifier(n)) for n in spec.inputs}
        if table is None:
            return _missing_table(asset, name, lake.table_identifier(spec.name))
        present = {n: t for n, t in inputs.items() if t is not None}
        if len(present) < len(inputs):
            return dg.AssetCheckResult(passed=False, description="An input table is missing.")
        if not windowed:
            done = sql_table_caught_up(spec, present, table)
            return dg.AssetCheckResult(
                passed=done,
                description="Up to date with its inputs."
                if done
                else "Behind its inputs (new rows, or an input re-created or rolled back): "
                "materialize it (the derived tables' run); if that fails, its error says why.",
            )
        coverage = reconcile_windows(spec, present[spec.source], table)
        return dg.AssetCheckResult(
            passed=coverage.passed,
            metadata={
                "input_windows": coverage.input_windows,
                "table_windows": coverage.table_windows,
                "missing_windows": len(coverage.missing),
                "extra_windows": len(coverage.extra),
            },
            description=(
                f"{coverage.table_windows} windows, as in the input."
                if coverage.passed
                else f"{coverage.table_windows} windows, the input has {coverage.input_windows} "
                f"(missing {coverage.missing}, extra {coverage.extra}): materialize it (the "
                "derived tables' run); if that fails, its error says why."
            ),
        )

    return sql_table_check


def derived_checks(
    declaration: LakeDeclaration, streams: list[StreamKeys]
) -> list[dg.AssetChecksDefinition]:
    """The generated checks: reconciliation with each raw table, each declared table's
    schema, the quarantine ratio, the aggregate's sums, and each ``derived:`` table's."""
    return [
        *(_reconciliation_check(declaration, keys) for keys in streams),
        *(_schema_check(table) for table in declaration.tables),
        _quarantine_ratio_check(streams),
        _aggregate_check(declaration.aggregate_source),
        *(
            check
            for spec in declaration.derived
            for check in (_upsert_checks(spec) if spec.upsert else [_sql_check(spec)])
        ),
    ]


def all_checks(
    declaration: LakeDeclaration, streams: list[StreamKeys]
) -> list[dg.AssetChecksDefinition]:
    return [
        *(check for keys in streams for check in raw_checks(keys)),
        *derived_checks(declaration, streams),
    ]
