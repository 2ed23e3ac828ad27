"""What the spark-submit entry point reports back through Pipes after a run, read from the
lake: only the tables the run committed to, as the in-process derive step reports them."""

from __future__ import annotations

import pyarrow as pa

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.tables import ensure_table_for_arrow
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.submit import _Reporter

ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


def test_a_remote_derive_reports_only_the_tables_it_committed_to(
    streamless_settings: Settings,
) -> None:
    catalog = open_lake(streamless_settings)
    catalog.create_namespace_if_not_exists(streamless_settings.namespace)
    changed, untouched = (
        ensure_table_for_arrow(catalog, streamless_settings.table_identifier(name), ROWS.schema)
        for name in ("events", "event_counts_per_minute")
    )
    untouched.append(ROWS)
    reporter = _Reporter(streamless_settings, ["events", "event_counts_per_minute"])
    changed.append(ROWS)

    reported = reporter.metadata()

    assert list(reported) == ["events"], reported
    assert reported["events"]["rows_added"] == 2
    assert reported["events"]["committed"] is True
