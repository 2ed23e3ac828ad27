"""The tables derived from the raw tables as one Dagster multi-asset.

The declared tables (one asset each, from the declaration file), ``events_quarantine``,
``event_counts_per_minute`` and the ``derived:`` tables are refreshed together by
``kinesis_lake.pipeline.derive``: one routing pass over the raw files appended since the
last refresh feeds them all. The asset only starts that refresh and reports each table's
commit. Metadata keys are stable (dashboards, the CLI and the README refer to them).

Who runs it: the ingestion run itself, after each raw commit, once raw's blocking check
(duplicates) passed on it (``follow.py``); declarative automation, eagerly after a raw
update no ingestion run followed (following failed, or a run that planned raw's checks
itself, as one launched from the UI with them does), unless that check failed. Upkeep is
not an asset: the ``iceberg_maintenance`` job (``maintenance.py``) records it on each table
as an observation.

Invariant: every materialization is one commit of its table, yielded as it lands. A table
the refresh did not commit to gets none (its output is skippable): a run that found nothing
new used to report every table again, commits that never happened. Its checks are then
skipped with it (Dagster skips a check whose asset was not materialized), so the verdict
on the table's last commit stays the latest completed one, which asset health shows, and
the automation, which requested the run, waits for raw to move again.
"""

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pyiceberg.schema import Schema

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import PipelineSettingsResource, SparkResource
from kinesis_lake.defs.streams import OWNERS, StreamKeys
from kinesis_lake.defs.tables import (
    DERIVE_POOL,
    EVENT_COUNTS_PER_MINUTE,
    EVENTS_QUARANTINE,
    refresh_materialization,
    table_column_schema,
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
from kinesis_lake.pipeline.preflight import check_event_schema

if TYPE_CHECKING:
    # Type only: loading the definitions must not import PySpark.
    from kinesis_lake.pipeline.derive import DeriveResult
    from kinesis_lake.pipeline.refresh import TableRefresh

DERIVED_GROUP = "derived"


def derived_automation(declaration: LakeDeclaration) -> dg.AutomationCondition:
    """Follow raw automatically (eager already waits while raw or this asset is in
    progress), but never over raw data a blocking check (duplicates) rejected, nor while a
    table upstream, however far, is being written.

    The last clause is for ingestion runs: such a run plans raw only and refreshes the
    downstream tables itself, one after another (``follow.py``). Eager's wait covers direct
    dependencies: the aggregate, whose input the run had just refreshed, looked ready, and
    the automation requested a derive run (all the tables: one step) that queued behind the
    run's refresh and found nothing new. Dagster has no "any ancestor" condition: the check
    is nested as deep as the derived tables go (routed, aggregate, then each ``derived:``
    table at most one level below the ones declared before it)."""
    levels = 2 + len(declaration.derived)
    written = dg.AutomationCondition.in_progress()
    upstream = dg.AutomationCondition.any_deps_match(written)
    for _ in range(levels - 1):
        upstream = dg.AutomationCondition.any_deps_match(written | upstream)
    return (
        dg.AutomationCondition.eager()
        & dg.AutomationCondition.all_deps_blocking_checks_passed()
        & ~upstream.with_label("an upstream table is being written")
    ).with_label("eager_unless_blocked")


_DERIVED_COMMON: dict[str, Any] = {
    "group_name": DERIVED_GROUP,
    "kinds": {"spark", "iceberg"},
    "owners": OWNERS,
    "skippable": True,  # a table with nothing new is not materialized (module docstring)
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
    declaration: LakeDeclaration, spec: DerivedTable, namespace: str, common: dict[str, Any]
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
        **common,
    )


def derived_specs(
    declaration: LakeDeclaration, namespace: str, streams: list[StreamKeys]
) -> list[dg.AssetSpec]:
    """One asset per declared table, the quarantine, the aggregate, then one per
    ``derived:`` table."""
    raw_of = {keys.stream: keys.raw_asset for keys in streams}
    path = _shown_path(declaration.path)
    common = {**_DERIVED_COMMON, "automation_condition": derived_automation(declaration)}
    specs = [
        dg.AssetSpec(
            dg.AssetKey(table.name),
            deps=[raw_of[table.stream]],
            description=_declared_table_description(table, path),
            metadata={
                "dagster/table_name": f"{namespace}.{table.name}",
                "dagster/column_schema": table_column_schema(parsed_table_schema(table.schema)),
            },
            **common,
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
            **common,
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
            **common,
        ),
        *(
            _derived_table_spec(declaration, spec, namespace, common)
            for spec in declaration.derived
        ),
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
    ) -> Iterator[dg.MaterializeResult | dg.AssetMaterialization]:
        lake = settings.settings()
        check_event_schema(lake)
        session = spark.session
        catalog = open_lake(lake)
        reported: set[str] = set()
        for name, refresh, numbers in _refresh_as_commits_land(session, lake):
            materialization = refresh_materialization(catalog, name, refresh, numbers)
            # A table added to the declaration can commit twice in one refresh (its backfill,
            # then the new records): the step's output is its first commit, the next ones
            # are materializations of their own, since an output can be yielded only once.
            yield materialization if name in reported else _as_result(materialization)
            reported.add(name)

    return derived_tables


def _as_result(materialization: dg.AssetMaterialization) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        asset_key=materialization.asset_key, metadata=materialization.metadata
    )


_DONE = object()


def _refresh_as_commits_land(
    session: Any, lake: Settings
) -> Iterator[tuple[str, "TableRefresh", dict[str, int]]]:
    """Run one downstream refresh in a thread and hand out each table's commit as it lands
    (name, refresh, its numbers), so a step yields it then."""
    from kinesis_lake.pipeline.derive import refresh_downstream  # PySpark: only in a step
    from kinesis_lake.pipeline.session_thread import session_thread

    commits: queue.Queue[Any] = queue.Queue()
    outcome: dict[str, Any] = {}

    def on_commit(name: str, refresh: "TableRefresh", numbers: dict[str, int]) -> None:
        commits.put((name, refresh, numbers))

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
