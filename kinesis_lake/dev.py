"""``make dev``: the local Kinesis endpoint, a Spark Connect server and ``dagster dev``,
until Ctrl-C.

The endpoint keeps its data under ``.data/dev/kinesis`` and Dagster its runs under
``.data/dev/dagster_home``, so stopping and starting again picks up where it was. Runs and
commands attach to the Connect server (``SPARK_MASTER=sc://127.0.0.1:15002``) instead of
starting a JVM each; a ``SPARK_MASTER`` set beforehand is used as it is, with no server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def session_commands(endpoint_url: str, data_dir: Path, spark_master: str | None = None) -> str:
    """The commands that reach this session's stream and lake (and Spark) from another
    shell: the CLI's own default data directory is another lake."""
    lake = f"KINESIS_ENDPOINT_URL={endpoint_url} KINESIS_LAKE_DATA_DIR={data_dir}"
    if spark_master:
        lake += f" SPARK_MASTER={spark_master}"
    cli = ".venv/bin/kinesis-lake --profile profiles/local.env"
    return "\n".join(
        [
            "From another shell, on this session's stream and lake:",
            f"  export {lake}",
            f"  {cli} produce --count 1000 --malformed-every 50 --unrouted-every 100",
            f'  {cli} query "SELECT event_type, count(*) FROM events GROUP BY 1"',
            f"  {cli} history raw_events",
            f"  {cli} check",
        ]
    )


def run_dev(port: int = 3000) -> None:
    from kinesis_lake.config import load_profile
    from kinesis_lake.kinesis.endpoint import LOCAL_ENDPOINT_PORT

    load_profile(REPO_ROOT / "profiles" / "local.env")
    data_dir = Path(
        os.environ.setdefault("KINESIS_LAKE_DATA_DIR", str(REPO_ROOT / ".data" / "dev"))
    )
    dagster_home = data_dir / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")

    from kinesis_lake.config import Settings
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
    from kinesis_lake.kinesis.streams import ensure_stream

    endpoint = LocalKinesisEndpoint.keeping_data_in(
        data_dir / "kinesis",
        os.environ.get("KINESIS_LAKE_ENDPOINT_KIND", "auto"),
        port=LOCAL_ENDPOINT_PORT,
    )
    with endpoint, _spark_for_runs(data_dir):
        os.environ["KINESIS_ENDPOINT_URL"] = endpoint.url
        settings = Settings.from_env()
        ensure_stream(
            kinesis_client(endpoint.url, settings.region),
            settings.stream_name,
            settings.shard_count,
        )
        print(
            f"{endpoint.kind} Kinesis endpoint on {endpoint.url}, stream '{settings.stream_name}'"
        )
        print(f"Dagster UI:   http://127.0.0.1:{port}")
        print(f"Spark:        {os.environ.get('SPARK_MASTER')}")
        print(session_commands(endpoint.url, data_dir, os.environ.get("SPARK_MASTER")))
        env = {**os.environ, "DAGSTER_HOME": str(dagster_home)}
        with contextlib.suppress(KeyboardInterrupt):
            subprocess.run(dagster_dev_command(port), env=env, cwd=REPO_ROOT, check=False)


LOW_LATENCY_RUNS = {
    "KINESIS_LAKE_SENSOR_INTERVAL_SECONDS": "5",
    "KINESIS_LAKE_RUN_LINGER_SECONDS": "30",
    "KINESIS_LAKE_MAINTENANCE_CRON": "*/10 * * * *",
}
"""What ``make dev`` sets (unless set already) when its runs attach to its Connect server:
the deployment benchmark 10 measures as ``connect_lingering``. Without a JVM to start per
run, ticking every 5 s is cheap, and a run that lingers takes a steady stream's records
on its next 1 s trigger instead of in the next run; it commits up to once a second while
they flow, so upkeep runs every 10 minutes instead of hourly."""


@contextlib.contextmanager
def _spark_for_runs(data_dir: Path) -> Iterator[None]:
    """A Connect server for this session's runs, unless SPARK_MASTER was set already."""
    if os.environ.get("SPARK_MASTER"):
        yield
        return
    from kinesis_lake.spark.connect_server import ConnectServer

    with ConnectServer(log_dir=data_dir / "logs") as server:
        os.environ["SPARK_MASTER"] = server.url
        for variable, value in LOW_LATENCY_RUNS.items():
            os.environ.setdefault(variable, value)
        yield


def dagster_dev_command(port: int) -> list[str]:
    """``dagster dev`` on loopback only, with this repository's workspace."""
    return [
        sys.executable,
        "-m",
        "dagster",
        "dev",
        "-w",
        str(REPO_ROOT / "workspace.yaml"),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]
