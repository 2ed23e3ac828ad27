"""``make demo``: the whole pipeline once, on this machine, through Dagster.

It starts the local Kinesis endpoint and, in two waves, sends sample clickstream events
(a few deliberately malformed, a few that no route takes) and materializes every asset
and runs every asset check in one Dagster run; then it prints a few rows of every table
of the declaration (``schemas/clickstream.yaml``, from ``profiles/local.env``) like
Spark's ``.show()``, the quarantine by reason and a summary, and exits non-zero if
anything disagrees. Two runs, so the UI has two points to plot.

State goes to ``.data/demo`` (cleared at start, so a demo never sees an old one), laid
out like ``make dev``'s: the lake, the endpoint's streams and the Dagster instance with
the repository's ``dagster.yaml``. ``make dev DATA_DIR=.data/demo`` then opens the UI on
what the demo did: both runs, every table's plots and every check's result.

``KINESIS_LAKE_DEMO_FORMAT`` (``kinesis-lake demo --format``) sends the events as Avro
instead: ``avro`` (the schema ``schemas/clickstream_event.avsc``) or
``glue-schema-registry`` (Avro behind the registry's header, its version registered in a
local moto Glue that the demo starts on 127.0.0.1). The declaration is then the shipped one
with its stream declared in that format, written next to the lake
(``.data/demo/clickstream_<format>.yaml``), so the tables and checks are the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

REPO_ROOT = Path(__file__).resolve().parent.parent
MALFORMED_EVERY = 50
UNROUTED_EVERY = 100
FORMAT_SETTING = "KINESIS_LAKE_DEMO_FORMAT"


def run_demo(events: int = 2000, payload_format: str | None = None) -> int:
    from kinesis_lake.config import load_profile
    from kinesis_lake.errors import ConfigurationError
    from kinesis_lake.events.payload_formats import JSON, PRODUCED_FORMATS

    load_profile(REPO_ROOT / "profiles" / "local.env")
    kind = payload_format or os.environ.get(FORMAT_SETTING) or JSON
    if kind not in PRODUCED_FORMATS:
        raise ConfigurationError(
            f"{FORMAT_SETTING}={kind!r}: the demo sends {', '.join(PRODUCED_FORMATS)}; pick one"
        )
    data_dir = Path(os.environ.get("KINESIS_LAKE_DEMO_DIR", REPO_ROOT / ".data" / "demo"))
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    os.environ["KINESIS_LAKE_DATA_DIR"] = str(data_dir)
    with contextlib.ExitStack() as stack:
        if kind != JSON:
            _declare_format(kind, data_dir, stack)
        return _run(events, data_dir)


def _declare_format(kind: str, data_dir: Path, stack: contextlib.ExitStack) -> None:
    """Point the demo at the shipped declaration with its stream declared as ``kind``;
    a registry stream gets a moto Glue of its own (stopped when ``stack`` closes)."""
    from kinesis_lake.config import Settings
    from kinesis_lake.events.payload_formats import GLUE_SCHEMA_REGISTRY
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
    from kinesis_lake.pipeline.encoded_events import declared_in_format

    settings = Settings.from_env()
    registry = None
    if kind == GLUE_SCHEMA_REGISTRY:
        glue = stack.enter_context(LocalKinesisEndpoint("moto"))
        registry = {"region": settings.region, "endpoint_url": glue.url}
        print(f"Local Glue Schema Registry (moto) on {glue.url}")
    shipped = settings.event_schema_path
    variant = data_dir / f"{shipped.stem}_{kind.replace('-', '_')}.yaml"
    variant.write_text(
        declared_in_format(shipped, kind, settings.stream_name, settings.raw_table_name, registry),
        encoding="utf-8",
    )
    os.environ["KINESIS_LAKE_EVENT_SCHEMA"] = str(variant)
    print(f"Declaration: {_shown(variant)} ({kind} records)")


def _run(events: int, data_dir: Path) -> int:
    import dagster as dg

    from kinesis_lake.config import Settings
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
    from kinesis_lake.kinesis.producer import put_records
    from kinesis_lake.kinesis.streams import ensure_stream
    from kinesis_lake.pipeline.encoded_events import demo_payloads, stream_format

    endpoint = LocalKinesisEndpoint.keeping_data_in(
        data_dir / "kinesis", os.environ.get("KINESIS_LAKE_ENDPOINT_KIND", "auto")
    )
    dagster_home = data_dir / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    with endpoint, dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        os.environ["KINESIS_ENDPOINT_URL"] = endpoint.url
        settings = Settings.from_env()
        print(f"Local {endpoint.kind} Kinesis endpoint on {endpoint.url}")
        client = kinesis_client(settings.endpoint_url, settings.region)
        ensure_stream(client, settings.stream_name, settings.shard_count)
        fmt = stream_format(settings)

        from kinesis_lake.definitions import defs

        job = defs.resolve_implicit_global_asset_job_def()
        sent, runs_ok = 0, True
        evaluations: Sequence[dg.AssetCheckEvaluation] = []
        for wave, count in enumerate((events // 2, events - events // 2), start=1):
            put = put_records(
                client,
                settings.stream_name,
                demo_payloads(
                    fmt,
                    settings.stream_name,
                    count,
                    malformed_every=MALFORMED_EVERY,
                    unrouted_every=UNROUTED_EVERY,
                    seed=6 + wave,
                ),
            )
            sent += put.sent
            print(
                f"Wave {wave}: sent {put.sent} {fmt.kind} events to '{settings.stream_name}' "
                f"(some malformed and some heartbeats that no route takes, on purpose); "
                "materializing every asset and running every check"
            )
            result = job.execute_in_process(
                instance=instance,
                raise_on_error=False,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
            runs_ok = runs_ok and result.success
            evaluations = result.get_asset_check_evaluations()
        code = _report(settings, sent, runs_ok, evaluations)
    print(
        "\nSee both runs, every table's plots and every check in the Dagster UI:\n"
        f"  make dev DATA_DIR={_shown(data_dir)}"
    )
    return code


def _shown(path: Path) -> str:
    """Relative to the repository when inside it (as the user would type it)."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _report(settings, sent: int, run_ok: bool, evaluations) -> int:
    from kinesis_lake.events.declaration_file import load_declaration
    from kinesis_lake.iceberg.query import format_table, run_sql
    from kinesis_lake.pipeline.lake import open_lake

    catalog = open_lake(settings)

    def show(sql: str) -> None:
        print(f"\n{sql}")
        print(format_table(run_sql(catalog, settings.namespace, sql), max_width=60))

    def scalar(sql: str) -> int:
        return int(run_sql(catalog, settings.namespace, sql)[0][0].as_py() or 0)

    declaration = load_declaration(settings.event_schema_path)
    for table in declaration.tables:
        # The key, then nested fields first: they are what a declaration adds to JSON.
        fields = sorted(table.schema.fields[1:], key=lambda f: not f.is_nested)
        columns = ", ".join(f'"{f.name}"' for f in [table.schema.fields[0], *fields][:4])
        show(f"SELECT {columns} FROM {table.name} ORDER BY event_timestamp LIMIT 3")
    show(
        "SELECT coalesce(target_table, '-') AS target_table, split_part(error, ':', 1) AS "
        "reason, count(*) AS n FROM events_quarantine GROUP BY 1, 2 ORDER BY 1, 2"
    )
    show(
        "SELECT event_type, sum(event_count) AS events FROM event_counts_per_minute "
        "GROUP BY 1 ORDER BY 1"
    )
    for spec in declaration.derived:
        if spec.upsert is not None:
            key, version = spec.upsert.key, spec.upsert.version
            show(
                f'SELECT "{key}", "{version}", * EXCLUDE ("{key}", "{version}", stream_name, '
                f"shard_id, sequence_number, sub_sequence_number) FROM {spec.name} "
                "ORDER BY 1 LIMIT 3"
            )
        else:
            show(f"SELECT * FROM {spec.name} ORDER BY 1 LIMIT 3")
    counts = {
        "raw_events": scalar("SELECT count(*) FROM raw_events"),
        **{t: scalar(f"SELECT count(*) FROM {t}") for t in declaration.names},
        "events_quarantine": scalar("SELECT count(*) FROM events_quarantine"),
        "event_counts (sum)": scalar("SELECT sum(event_count) FROM event_counts_per_minute"),
        **{t.name: scalar(f"SELECT count(*) FROM {t.name}") for t in declaration.derived},
    }
    passed = [e for e in evaluations if e.passed]
    failed = [e for e in evaluations if not e.passed]
    print("\nSummary")
    print(f"  records sent            {sent}")
    for name, value in counts.items():
        print(f"  {name:<24}{value}")
    print(f"  checks passed           {len(passed)}/{len(evaluations)}")
    for evaluation in sorted(
        evaluations, key=lambda e: (e.asset_key.to_user_string(), e.check_name)
    ):
        verdict = "passed" if evaluation.passed else "FAILED"
        print(f"    {verdict}  {evaluation.asset_key.to_user_string()}: {evaluation.check_name}")
    # Each raw row in its tables or in quarantine is what reconciles_with_raw checks; here,
    # that nothing is lost on the way in and the counts follow their table.
    consistent = (
        counts["raw_events"] == sent
        and counts["event_counts (sum)"] == counts[declaration.aggregate_source]
    )
    ok = run_ok and consistent and not failed and bool(evaluations)
    print("\nDemo " + ("succeeded: every record landed exactly once." if ok else "FAILED."))
    if not ok:
        print(f"Spark's log: {settings.log_dir / 'spark.log'}")
    return 0 if ok else 1
