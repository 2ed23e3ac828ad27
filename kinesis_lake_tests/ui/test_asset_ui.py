"""The Dagster UI in a real browser: materialize everything from the asset graph, twice,
then find every table's plots and check results on its asset page, and what the backlog
sensor's tick saw and decided.

Everything real: ``dagster dev`` over the repository's workspace and dagster.yaml, runs
launched by its daemon (Spark, the local Kinesis endpoint, the Iceberg catalog), headless
Chromium. A plot needs two points, so everything is materialized twice with "Materialize
all" on the global asset graph, with more events sent in between.

The sensors and the schedule are stopped first. The backlog sensor would otherwise launch
its own ingestion run for the events sent here, and the automation sensor derived runs
after it: correct, but the test could no longer say which run the UI launched, and Spark
runs would pile up on a 2-core machine.

Screenshots go to ``test-output/browser/<test name>/`` at the repository root.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from kinesis_lake.config import Settings
from kinesis_lake.defs.raw_assets import RAW_EVENTS
from kinesis_lake.defs.raw_checks import (
    DATA_LOSS_CHECK,
    DUPLICATES_CHECK,
    FRESHNESS_CHECK,
    POSITIONS_CHECK,
    STALL_CHECK,
)
from kinesis_lake.defs.table_checks import (
    AGGREGATE_CHECK,
    QUARANTINE_CHECK,
    RECONCILIATION_CHECK,
    SCHEMA_CHECK,
)
from kinesis_lake.defs.tables import EVENT_COUNTS_PER_MINUTE, EVENTS_QUARANTINE
from kinesis_lake_tests.pipeline_helpers import produce
from kinesis_lake_tests.ui.dagster_server import BACKLOG_SENSOR, DagsterDevServer

FIRST_EVENTS = 200
MORE_EVENTS = 100
MALFORMED_EVERY = 25
RUN_SECONDS = 900
"""Per run: a run worker process and its Spark JVM, slow when the machine is busy."""

ROW_COUNT = "dagster/row_count"
TABLES = {
    # asset key: (its checks, the numeric metadata plotted besides the row count)
    RAW_EVENTS.to_user_string(): (
        (DUPLICATES_CHECK, FRESHNESS_CHECK, STALL_CHECK, POSITIONS_CHECK, DATA_LOSS_CHECK),
        "max_millis_behind_latest",
    ),
    "events": ((SCHEMA_CHECK,), "rows_added"),
    EVENTS_QUARANTINE.to_user_string(): ((RECONCILIATION_CHECK, QUARANTINE_CHECK), "rows_added"),
    EVENT_COUNTS_PER_MINUTE.to_user_string(): ((AGGREGATE_CHECK,), "windows_recomputed"),
}
_LAUNCHED = re.compile(r"Launched run ([0-9a-f]{8})")


def shoot(target: Page | Locator, folder: Path, name: str) -> None:
    """Screenshot of the page (or one element of it), its path printed for the log."""
    path = folder / f"{name}.png"
    target.screenshot(path=str(path))
    print(f"screenshot: {path}")


def launched_run(page: Page, server: DagsterDevServer, button: Locator) -> str:
    """Click a launch button; the run id the UI's "Launched run" toast names."""
    button.click()
    toast = page.get_by_text(_LAUNCHED)
    expect(toast).to_be_visible()
    match = _LAUNCHED.search(toast.inner_text())
    assert match is not None
    return server.run_id_with_prefix(match.group(1))


def plot(page: Page, metadata_key: str) -> Locator:
    """The plot card of one numeric metadata key: its title and its chart canvas."""
    title = page.get_by_text(metadata_key, exact=True)
    return page.locator("div", has=title).filter(has=page.locator("canvas")).last


_LINE_DRAWN = """canvas => {
    // Pixels of the chart line's colour (Dagster's indigo), not axes or grid (grey).
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let count = 0;
    for (let i = 0; i < data.length; i += 4) {
        const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
        if (a > 0 && b > 150 && b - r > 60 && b - g > 80) count++;
    }
    return count > 100;
}"""


def wait_until_drawn(page: Page, canvas: Locator) -> None:
    """Until the chart has drawn its series line (the canvas exists before it draws)."""
    page.wait_for_function(_LINE_DRAWN, arg=canvas.element_handle())


@pytest.mark.timeout(2 * RUN_SECONDS + 600)
def test_materialize_all_from_the_graph_then_see_plots_and_checks_of_every_table(
    page: Page, dagster_ui: DagsterDevServer, lake_settings: Settings, screenshots: Path
):
    server = dagster_ui
    produce(lake_settings, FIRST_EVENTS, malformed_every=MALFORMED_EVERY, seed=701)

    page.goto(f"{server.url}/asset-groups")
    materialize_all = page.get_by_role("button", name=re.compile(r"Materialize all"))
    expect(materialize_all).to_be_enabled()
    # Upkeep is a job of ops, not assets: "Materialize all" takes raw_events and the three
    # derived tables (it took the four maintenance assets too, 2.5 minutes of compaction).
    expect(materialize_all).to_have_text(re.compile(r"Materialize all \(4\)"))
    expect(page.get_by_text(re.compile(r"maintenance"))).to_have_count(0)
    shoot(page, screenshots, "01-asset-graph")
    first_run = launched_run(page, server, materialize_all)
    server.wait_for_run(first_run, RUN_SECONDS)
    page.reload()
    expect(materialize_all).to_be_enabled()
    expect(page.get_by_text("ingestion", exact=True).last).to_be_visible()
    expect(page.get_by_text("fetching statuses")).to_have_count(0)
    shoot(page, screenshots, "02-asset-graph-materialized")

    produce(lake_settings, MORE_EVENTS, malformed_every=MALFORMED_EVERY, seed=702)
    second_run = launched_run(page, server, materialize_all)
    server.wait_for_run(second_run, RUN_SECONDS)

    page.goto(f"{server.url}/assets/raw_events")
    expect(page.get_by_text("Row count")).to_be_visible()
    expect(page.get_by_text(str(FIRST_EVENTS + MORE_EVENTS), exact=True).first).to_be_visible()
    for number, (table, (checks, plotted)) in enumerate(TABLES.items(), start=3):
        page.goto(f"{server.url}/assets/{table}")
        page.get_by_role("button", name="Plots").click()
        for key in (ROW_COUNT, plotted):
            card = plot(page, key)
            card.scroll_into_view_if_needed()
            expect(card.locator("canvas")).to_be_visible()
            wait_until_drawn(page, card.locator("canvas"))
            shoot(card, screenshots, f"plot-{table}-{key.replace('/', '_')}")
        plot(page, ROW_COUNT).scroll_into_view_if_needed()
        shoot(page, screenshots, f"{number:02d}-{table}-plots")

        page.goto(f"{server.url}/assets/{table}?view=checks")
        for check in checks:
            expect(page.get_by_text(check, exact=True).first).to_be_visible()
        expect(page.get_by_text("Succeeded", exact=True)).to_have_count(len(checks))
        expect(page.get_by_text(re.compile("Not evaluated", re.IGNORECASE))).to_have_count(0)
        shoot(page, screenshots, f"{number:02d}-{table}-checks")

    # The stream names the sensor that records it and launches its ingestion.
    page.goto(f"{server.url}/assets/kinesis_stream")
    expect(page.get_by_text("kinesis_backlog_sensor").first).to_be_visible()
    expect(page.get_by_text("No automations found")).to_have_count(0)
    shoot(page, screenshots, "07-kinesis_stream")
    # The backlog sensor's skip reason is on its tick, where the UI shows it.
    skipped = [t for t in server.sensor_ticks(BACKLOG_SENSOR) if t["status"] == "SKIPPED"]
    assert any((t["skipReason"] or "").startswith("No backlog: all 2 shards") for t in skipped)
    repository, location = server.repository()
    page.goto(f"{server.url}/locations/{repository}@{location}/sensors/{BACKLOG_SENSOR}")
    # A skipped tick's status tag reads "0 runs requested"; hovering it shows the reason.
    page.get_by_role("row").filter(has_text="0 runs requested").first.get_by_text(
        "0 runs requested", exact=True
    ).first.hover()
    expect(page.get_by_text(re.compile(r"No backlog: all 2 shards")).first).to_be_visible()
    shoot(page, screenshots, "08-backlog-sensor-skip-reason")
    # Its logs, from its row in the tick history, say what it saw and why it skipped.
    view_logs = page.get_by_role("button", name="View logs")
    ticks = page.get_by_role("row").filter(has_text="0 runs requested").filter(has=view_logs)
    ticks.first.get_by_role("button", name="View logs").click()
    saw = f"Stream {lake_settings.stream_name}: 2 shards (retention 24 h), no backlog"
    expect(page.get_by_text(saw)).to_be_visible()
    expect(page.get_by_text("Skipped: No backlog: all 2 shards")).to_be_visible()
    shoot(page, screenshots, "09-backlog-sensor-tick-logs")
