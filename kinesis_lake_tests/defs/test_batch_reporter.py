"""The continuous mode's batch reporter: the Dagster instance's event storage (Postgres in
production) can be unreachable for a moment. The caller's own ``then`` must still see the
batch (a caller that stops after N rows would otherwise never stop), and the failure must
still surface so the ingestion loop logs it.

The instance here is a stand-in whose only method raises as a lost database connection
would: a real instance's storage cannot be made to fail on demand."""

from __future__ import annotations

import pytest

from kinesis_lake.defs.raw_assets import raw_batch_reporter
from kinesis_lake.pipeline.ingest_report import BatchReport


class _UnreachableEventStorage:
    def report_runless_asset_event(self, event: object) -> None:
        raise ConnectionError("could not connect to server: Connection refused")


def test_then_sees_a_batch_whose_recording_failed(streamless_settings):
    settings = streamless_settings
    batch = BatchReport(
        batch_id=3,
        rows=10,
        seconds=0.5,
        raw_rows_total=40,
        snapshot_id=1,
        max_millis_behind_latest=0,
        skipped_ranges=0,
    )
    seen: list[BatchReport] = []
    report = raw_batch_reporter(settings, _UnreachableEventStorage(), then=seen.append)  # type: ignore[arg-type]

    with pytest.raises(ConnectionError):
        report(batch)

    assert seen == [batch]
