"""The command line as a new user with a declaration of their own meets it (issue 32): the
streams it declares, the first refresh's summary, a lake not filled yet. Each case runs the
real CLI process."""

from __future__ import annotations

from pathlib import Path

import boto3

from kinesis_lake.config import Settings
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.pipeline_helpers import (
    one_error_line,
    produce,
    run_cli,
    run_cli_with,
    settings_env,
)

CLICKSTREAM = Path(__file__).resolve().parents[1] / "schemas" / "clickstream.yaml"


def _declaring_streams(settings: Settings, tmp_path: Path, *names: str) -> dict[str, str]:
    """The environment of ``settings`` with a declaration of its own that names ``names``
    under ``streams:``, a table reading each."""
    declaration = tmp_path / "mine.yaml"
    tables = "\n".join(
        f"  - {{name: t{n}, stream: {name}, fields: [{{name: id, type: string}}]}}"
        for n, name in enumerate(names)
    )
    streams = "\n".join(f"  - {{name: {name}}}" for name in names)
    declaration.write_text(f"streams:\n{streams}\ntables:\n{tables}\n")
    return {**settings_env(settings), "KINESIS_LAKE_EVENT_SCHEMA": str(declaration)}


def test_a_missing_declared_stream_is_named_as_declared_and_create_streams_creates_it(
    kinesalite_endpoint, settings_factory, tmp_path
):
    """The error named KINESIS_STREAM_NAME, which the user never set (the name came from
    the declaration's ``streams:``), and pointed at ``produce``, which sends the demo's
    events."""
    settings = settings_factory(kinesalite_endpoint, shard_count=3)
    orders, clicks = f"{settings.stream_name}-orders", f"{settings.stream_name}-clicks"
    env = _declaring_streams(settings, tmp_path, orders, clicks)

    line = one_error_line(run_cli_with(env, "ingest"))

    assert "KINESIS_STREAM_NAME" not in line, line
    assert f"stream {orders!r} (streams: in {tmp_path / 'mine.yaml'})" in line
    assert "no such stream" in line and "kinesis-lake create-streams" in line

    created = run_cli_with(env, "create-streams")

    assert created.returncode == 0, created.stderr
    assert created.stdout.splitlines() == [
        f"{orders}: created with 3 shards",
        f"{clicks}: created with 3 shards",
    ]
    client = boto3.client("kinesis", endpoint_url=settings.endpoint_url, region_name="us-east-1")
    for name in (orders, clicks):
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        assert (summary["StreamStatus"], summary["OpenShardCount"]) == ("ACTIVE", 3)
    again = run_cli_with(env, "create-streams", "--stream", clicks)
    assert again.stdout.splitlines() == [f"{clicks}: exists (3 shards), left as it is"]


def test_ingest_derive_summary_lists_every_table_of_the_declaration(
    kinesalite_endpoint, settings_factory
):
    """It left out the upsert and SQL tables (``derived:``)."""
    settings = settings_factory(kinesalite_endpoint, event_schema_path=CLICKSTREAM)
    produce(settings, 60, seed=32)

    done = run_cli(settings, "ingest", "--derive")

    assert done.returncode == 0, done.stderr[-2000:]
    (summary,) = [line for line in done.stdout.splitlines() if line.startswith("derived: ")]
    declaration = load_declaration(CLICKSTREAM)
    for name in [*declaration.names, *(spec.name for spec in declaration.derived)]:
        assert f" to {name}" in summary, (name, summary)


def test_query_of_a_lake_without_its_namespace_says_what_to_do_in_one_line(
    kinesalite_endpoint, settings_factory
):
    """A catalog created (by a sensor or a check of ``make dev``) before any run wrote a
    table: the query printed a traceback ending in NoSuchNamespaceError."""
    settings = settings_factory(kinesalite_endpoint)
    open_lake(settings).list_namespaces()  # the catalog's database exists, no namespace
    assert (settings.data_dir / "catalog.db").exists()

    query = one_error_line(run_cli(settings, "query", "SELECT count(*) FROM raw_events"))
    history = one_error_line(run_cli(settings, "history", "raw_events"))

    expected = (
        f"kinesis-lake: No table in {settings.namespace} at KINESIS_LAKE_DATA_DIR="
        f"{settings.data_dir} yet: "
    )
    assert query.startswith(expected), query
    assert "kinesis-lake ingest" in query
    assert history.startswith(expected), history
