"""The local services: ``endpoint`` (a Kinesis endpoint on 127.0.0.1), ``connect-server``
(a long-lived Spark), ``demo`` (the whole pipeline once) and ``dev`` (the endpoint and
``dagster dev``)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from kinesis_lake.cli.common import Commands, add_command, current_settings
from kinesis_lake.config import SPARK_CONNECT_PORT
from kinesis_lake.events.payload_formats import PRODUCED_FORMATS
from kinesis_lake.kinesis.endpoint import LOCAL_ENDPOINT_PORT


def cmd_endpoint(args: argparse.Namespace) -> None:
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    settings = current_settings()
    data_dir = None if args.in_memory else settings.data_dir / "kinesis"
    endpoint = LocalKinesisEndpoint(
        args.kind or settings.endpoint_kind, port=args.port, data_dir=data_dir
    )
    endpoint.start()
    print(f"{endpoint.kind} Kinesis endpoint on {endpoint.url} (Ctrl-C to stop)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        endpoint.stop()


def add_endpoint(commands: Commands) -> None:
    endpoint = add_command(commands, "endpoint", "run the local Kinesis endpoint", cmd_endpoint)
    endpoint.add_argument("--port", type=int, default=LOCAL_ENDPOINT_PORT, help="port on 127.0.0.1")
    endpoint.add_argument(
        "--kind",
        choices=["auto", "kinesalite", "moto"],
        default=None,
        help="which endpoint; default: KINESIS_LAKE_ENDPOINT_KIND",
    )
    endpoint.add_argument("--in-memory", action="store_true", help="keep nothing on disk")


def cmd_connect_server(args: argparse.Namespace) -> None:
    from kinesis_lake.spark.runtime.connect_server import ConnectServer
    from kinesis_lake.spark.runtime.session import is_connect

    settings = current_settings()
    master = args.master or (
        "local[2]" if is_connect(settings.spark_master) else settings.spark_master
    )
    server = ConnectServer(port=args.port, master=master, log_dir=settings.log_dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        print(
            f"Spark Connect server ({master}) on {server.url}: set SPARK_MASTER={server.url} "
            f"(Ctrl-C to stop; log {server.log_file})",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            while not stop.wait(1):
                pass


def add_connect_server(commands: Commands) -> None:
    connect = add_command(
        commands,
        "connect-server",
        "run a long-lived Spark that commands and runs attach to (SPARK_MASTER=sc://...)",
        cmd_connect_server,
    )
    connect.add_argument("--port", type=int, default=SPARK_CONNECT_PORT, help="port to serve on")
    connect.add_argument(
        "--master", default=None, help="the server's Spark master; default: SPARK_MASTER"
    )


def cmd_demo(args: argparse.Namespace) -> None:
    from kinesis_lake.demo import run_demo

    sys.exit(run_demo(events=args.events, payload_format=args.format))


def add_demo(commands: Commands) -> None:
    demo = add_command(commands, "demo", "the whole pipeline once, end to end", cmd_demo)
    demo.add_argument("--events", type=int, default=2000, help="records to send, in two waves")
    demo.add_argument(
        "--format",
        choices=PRODUCED_FORMATS,
        default=None,
        help="how the events are sent: JSON, Avro, or Avro behind the Glue Schema Registry's "
        "header with a local moto registry; default: $KINESIS_LAKE_DEMO_FORMAT, else json",
    )


def cmd_dev(args: argparse.Namespace) -> None:
    from kinesis_lake.dev import run_dev

    run_dev(port=args.port, endpoint_port=args.endpoint_port, spark_port=args.spark_port)


def add_dev(commands: Commands) -> None:
    dev = add_command(commands, "dev", "local endpoint + dagster dev", cmd_dev)
    dev.add_argument("--port", type=int, default=3000, help="the Dagster UI's port")
    dev.add_argument(
        "--endpoint-port",
        type=int,
        default=LOCAL_ENDPOINT_PORT,
        help="the local Kinesis endpoint's port",
    )
    dev.add_argument(
        "--spark-port",
        type=int,
        default=SPARK_CONNECT_PORT,
        help="the Spark Connect server's port (none starts when SPARK_MASTER is set)",
    )
