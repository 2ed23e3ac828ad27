"""The checks of the tables the raw tables feed: every raw row accounted for once, each
table as its declaration says, the quarantine small, the aggregate's sums and each
``derived:`` table's own invariant.

A table a check reads may not exist yet (nothing materialized it): the check then fails
with :func:`missing_table`, naming the asset to materialize, rather than raising.
"""

import json
from typing import Any

import dagster as dg
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import PipelineSettingsResource
from kinesis_lake.defs.streams import StreamKeys
from kinesis_lake.defs.tables import EVENT_COUNTS_PER_MINUTE, EVENTS_QUARANTINE
from kinesis_lake.errors import SnapshotExpiredError
from kinesis_lake.events.declaration import QUARANTINE_TABLE, LakeDeclaration, TableDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.derived_tables import DerivedTable
from kinesis_lake.pipeline.derived_reconciliation import (
    SAMPLED_HISTORY_ROWS,
    reconcile_upsert,
    reconcile_windows,
    sql_table_caught_up,
)
from kinesis_lake.pipeline.lake import load_table, open_lake
from kinesis_lake.pipeline.reconcile import (
    RoutedReconciliation,
    compare_table_schema,
    quarantine_ratio,
    reconcile_aggregate,
    reconcile_routed,
)

RECONCILIATION_CHECK = "reconciles_with_raw"
SCHEMA_CHECK = "schema_matches_declared"
QUARANTINE_CHECK = "quarantine_ratio"
AGGREGATE_CHECK = "sums_match_events"
UNIQUE_KEYS_CHECK = "one_row_per_key"
RECOMPUTATION_CHECK = "matches_recomputation"
WINDOWS_CHECK = "windows_match_input"
CAUGHT_UP_CHECK = "caught_up_with_inputs"


def missing_table(asset: dg.AssetKey, check: str, identifier: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name=check,
        passed=False,
        description=f"Table {identifier} does not exist yet: materialize {asset.to_user_string()}.",
    )


def _reconciliation_description(report: RoutedReconciliation) -> str:
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
                return missing_table(EVENTS_QUARANTINE, name, lake.table_identifier(table_name))
            tables[table_name] = table
        raw, quarantine = tables.pop(lake.raw_table_name), tables.pop(QUARANTINE_TABLE)
        try:
            report = reconcile_routed(
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
            return missing_table(asset, SCHEMA_CHECK, identifier)
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
            return missing_table(EVENTS_QUARANTINE, QUARANTINE_CHECK, lake.quarantine_table)
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
            return missing_table(EVENT_COUNTS_PER_MINUTE, AGGREGATE_CHECK, lake.aggregate_table)
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
            return missing_table(asset, UNIQUE_KEYS_CHECK, lake.table_identifier(spec.name))
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
            return missing_table(asset, RECOMPUTATION_CHECK, lake.table_identifier(spec.name))
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
            return missing_table(asset, name, lake.table_identifier(spec.name))
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


def table_checks(
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
