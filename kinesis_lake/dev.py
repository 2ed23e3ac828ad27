"""``make dev``: the local Kinesis endpoint, a Spark Connect server and Dagster's local
deployment (webserver, daemon, code server), until Ctrl-C, SIGTERM or SIGHUP, each of which
stops all of them.

The endpoint keeps its data under ``.data/dev/kinesis`` and Dagster its runs under
``.data/dev/dagster_home``, so stopping and starting again picks up where it was. Runs and
commands attach to the Connect server (``SPARK_MASTER=sc://127.0.0.1:15002``) instead of
starting a JVM each; a ``SPARK_MASTER`` set beforehand is used as it is, with no server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import yaml

from kinesis_lake.config import SPARK_CONNECT_PORT
from kinesis_lake.kinesis.endpoint import LOCAL_ENDPOINT_PORT

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


def run_dev(
    port: int = 3000,
    endpoint_port: int = LOCAL_ENDPOINT_PORT,
    spark_port: int = SPARK_CONNECT_PORT,
) -> None:
    """Serve until stopped; every process it started is gone when it returns."""
    with _stopping_on_signals(), contextlib.suppress(KeyboardInterrupt):
        _serve(port, endpoint_port, spark_port)
    print("Stopped: Dagster, the Spark Connect server and the Kinesis endpoint.", flush=True)


def _serve(port: int, endpoint_port: int, spark_port: int) -> None:
    from kinesis_lake.config import load_profile

    load_profile(REPO_ROOT / "profiles" / "local.env")
    data_dir = Path(
        os.environ.setdefault("KINESIS_LAKE_DATA_DIR", str(REPO_ROOT / ".data" / "dev"))
    )
    dagster_home = data_dir / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    workspace = write_workspace(dagster_home)

    from kinesis_lake.config import Settings
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
    from kinesis_lake.kinesis.streams import ensure_stream

    endpoint = LocalKinesisEndpoint.keeping_data_in(
        data_dir / "kinesis",
        os.environ.get("KINESIS_LAKE_ENDPOINT_KIND", "auto"),
        port=endpoint_port,
    )
    with endpoint, _spark_for_runs(data_dir, spark_port):
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
        print(session_commands(endpoint.url, data_dir, os.environ.get("SPARK_MASTER")), flush=True)
        # Dagster runs in DAGSTER_HOME, so the dagster.yaml beside it is the one it uses
        # (from the repository it warned that its dagster.yaml "will not be used"); the
        # settings go as absolute values, so that no path depends on that directory.
        env = {**os.environ, **settings.to_env(), "DAGSTER_HOME": str(dagster_home)}
        with _process_group(dagster_dev_command(port, workspace), env, dagster_home) as dagster:
            dagster.wait()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _stopping_on_signals() -> Iterator[None]:
    """SIGTERM (a service manager, ``kill``) and SIGHUP (a closed terminal) stop dev as
    Ctrl-C does, by unwinding, so each ``with`` stops what it started: by default either
    one ended this process alone and orphaned Dagster, the JVM and the endpoint, which kept
    their ports. Signals after the first are ignored: they would cut the unwinding short."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        # os.write, not print: print may be mid-write in the main thread (reentrant call).
        note = f"{signal.Signals(signum).name}: stopping everything dev started\n"
        os.write(sys.stdout.fileno(), note.encode())
        raise KeyboardInterrupt

    previous = {each: signal.signal(each, interrupt) for each in STOP_SIGNALS}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)


DAGSTER_STOP_GRACE_S = 60.0
"""Dagster's own shutdown waits up to 60 s for its webserver and daemon."""
GROUP_STOP_GRACE_S = 10.0


@contextlib.contextmanager
def _process_group(
    command: list[str], env: dict[str, str], cwd: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` in a process group of its own, every process of which is gone on exit.

    Its own session, so a terminal's Ctrl-C reaches only dev, which stops it in order;
    and a group, because Dagster's shutdown leaves a run in flight running (its worker is
    a child of the code server, orphaned when that exits) and only the group finds it.
    Such a run stays STARTED until run monitoring fails it at the next start.
    """
    process = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # Dagster stops its services
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=DAGSTER_STOP_GRACE_S + GROUP_STOP_GRACE_S)
        for each in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, each)
            if _group_ends(process, GROUP_STOP_GRACE_S):
                break
        process.wait()


def _group_ends(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether ``process``'s group has no process left within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        process.poll()  # reap the leader: a zombie is still a member of its group
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


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
def _spark_for_runs(data_dir: Path, port: int) -> Iterator[None]:
    """A Connect server for this session's runs, warming up while Dagster starts, unless
    SPARK_MASTER was set already."""
    if os.environ.get("SPARK_MASTER"):
        yield
        return
    from kinesis_lake.spark.runtime.connect_server import ConnectServer

    server = ConnectServer(port=port, log_dir=data_dir / "logs")
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)  # also when a signal interrupts its start
        stack.enter_context(server)
        os.environ["SPARK_MASTER"] = server.url
        for variable, value in LOW_LATENCY_RUNS.items():
            os.environ.setdefault(variable, value)
        stack.enter_context(server_warm_up(server.url, data_dir))
        yield


WARM_UP_STOP_GRACE_S = 20.0
"""Stopped, the warm-up unwinds: refreshes under way on its other threads finish their
table first (a few seconds each on 2 cores), then its endpoint stops."""


@contextlib.contextmanager
def server_warm_up(spark_master: str, data_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``pipeline/server_warm_up.py`` in a process group of its own, beside whatever comes
    next (it says on stdout when it is done); on exit it is stopped if still going, its
    group killed if it does not end in time, and its scratch lake removed."""
    scratch = data_dir / "warm-up"
    log = data_dir / "logs" / "warm-up.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    module = "kinesis_lake.pipeline.server_warm_up"
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", module, spark_master, str(scratch), "--log", str(log)],
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # dev stops it: a terminal's signals reach dev only
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=WARM_UP_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # its endpoint too
                process.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def write_workspace(dagster_home: Path) -> Path:
    """The repository's ``workspace.yaml`` in ``dagster_home``, working directories made
    absolute: Dagster runs there, where a relative one would mean ``dagster_home``."""
    config = yaml.safe_load((REPO_ROOT / "workspace.yaml").read_text())
    for entry in config["load_from"]:
        for target in entry.values():
            if isinstance(target, dict) and "working_directory" in target:
                target["working_directory"] = str(REPO_ROOT / target["working_directory"])
    path = dagster_home / "workspace.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def dagster_dev_command(port: int, workspace: Path = REPO_ROOT / "workspace.yaml") -> list[str]:
    """Dagster's local deployment on loopback only, with ``workspace`` (see
    :func:`serve_dagster`)."""
    return [sys.executable, "-m", "kinesis_lake.dev", str(workspace), "127.0.0.1", str(port)]


def serve_dagster(workspace: Path, host: str, port: int) -> None:
    """Dagster's webserver, daemon and one shared code server, started as ``dg dev -w
    WORKSPACE`` starts them: through the implementation behind ``dagster dev``, which
    Dagster has superseded by ``dg dev`` (it warned so on every start). ``dg`` itself
    (dagster-dg-cli) would add 19 packages, Dagster+'s CLI among them, for this one call.
    Its shutdown (SIGINT or SIGTERM) stops the webserver and daemon in order."""
    from dagster._cli.dev import dev_command_impl
    from dagster_shared.cli import WorkspaceOpts

    dev_command_impl(
        code_server_log_level="warning",
        log_level="info",
        log_format="colored",
        port=str(port),
        host=host,
        use_legacy_code_server_behavior=False,
        shutdown_pipe=None,
        verbose=False,
        workspace_opts=WorkspaceOpts(workspace=[str(workspace)]),
    )


if __name__ == "__main__":
    serve_dagster(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
