"""Fixtures for browser tests: headless Chromium driven by Playwright, and a ``dagster dev``
on 127.0.0.1 over a fresh DAGSTER_HOME, a fresh lake and a stream on the local endpoint.

Playwright's own browser download needs the internet, so the system Chromium is used
(``make test`` installs it through ``scripts/bootstrap.sh --test-tools``). Its flags keep
it off the network: only the test's 127.0.0.1 server is ever contacted.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from kinesis_lake.config import Settings
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake_tests.defs.helpers import lake_env
from kinesis_lake_tests.ui.dagster_server import BACKLOG_SENSOR, REPO_ROOT, DagsterDevServer

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_SECONDS = 300
"""``dagster dev`` loads the code location in a subprocess: slow on a busy 2-core machine."""

UI_TIMEOUT_MS = 120_000
SCREENSHOTS = REPO_ROOT / "test-output" / "browser"


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """Session-scoped so that a missing browser fails the test before any server starts."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "Chromium is not installed, and the browser tests need it (Playwright's own "
            "browser download cannot work offline). Install it: `apt-get install chromium` "
            "(as root), or run `make test`, which installs it through "
            "`scripts/bootstrap.sh --test-tools`.",
            pytrace=False,
        )
    return found


@pytest.fixture
def screenshots(request: pytest.FixtureRequest) -> Path:
    """``test-output/browser/<test name>/`` at the repository root (git-ignored)."""
    folder = SCREENSHOTS / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def page(chromium_executable: str) -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1100})
            # Generous: the UI shares two cores with Spark runs (and other test suites).
            context.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            new_page = context.new_page()
            # Dagster's "Join the community" dialog may cover the page at any moment.
            new_page.add_locator_handler(
                new_page.get_by_role("button", name="Skip"), lambda button: button.click()
            )
            yield new_page
        finally:
            browser.close()


@pytest.fixture
def lake_settings(tmp_path: Path, kinesalite_endpoint, monkeypatch) -> Settings:
    """A fresh stream and lake; the same env reaches ``dagster dev`` and this process."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = lake_env(data_dir, kinesalite_endpoint.url, f"ui-{uuid.uuid4().hex[:10]}")
    env["PYICEBERG_HOME"] = str(data_dir)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.from_env(env)
    ensure_stream(
        kinesis_client(settings.endpoint_url, settings.region),
        settings.stream_name,
        settings.shard_count,
    )
    return settings


@pytest.fixture
def dagster_ui(lake_settings: Settings, tmp_path: Path) -> Iterator[DagsterDevServer]:
    """``dagster dev`` over the lake, sensors and schedules stopped (see the test) once the
    backlog sensor has ticked."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    server = DagsterDevServer(dict(os.environ), home, tmp_path / "dagster-dev.log")
    try:
        server.wait_until_serving(SERVER_START_SECONDS)
        # One tick first (the stream is empty: a skip whose reason the UI must show).
        server.wait_for_a_tick(BACKLOG_SENSOR, SERVER_START_SECONDS)
        server.stop_sensors_and_schedules()
        yield server
    finally:
        server.stop()
    assert server.alive() == [], "dagster dev left processes running"
