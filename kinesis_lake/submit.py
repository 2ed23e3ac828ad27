"""The program a Spark cluster runs: ``spark-submit kinesis_lake_submit.py ingest --derive``.

``make package`` writes ``build/package/kinesis_lake_submit.py``, two lines that call
:func:`main`, beside the packed virtualenv that ``spark.archives`` ships. The commands are
the CLI's own (``kinesis-lake ingest [--stream S] [--derive]``, run by ``cli.main``), plus
``derive``: one refresh of the downstream tables, which the Dagster asset of those tables
launches and which the CLI has only as ``ingest --derive``.

Launched by Dagster (``kinesis_lake.defs.launch``: EMR Serverless, an EMR step or a Glue
job through dagster-aws's Pipes clients), the job also speaks Dagster Pipes: it reads the
context Dagster injected (environment variables, or ``--dagster-pipes-*`` arguments on
Glue; inline, or an S3 object) and reports one materialization per asset in scope, with
the metadata the in-process assets give (``pipeline.run_report``), through S3 or the
driver's stdout, whichever Dagster's message reader asked for.

Arguments the launcher adds, which never reach the CLI:

* ``--kinesis-lake-env JSON``: settings (``KINESIS_*`` variables) to set first, because a
  Glue job or an EMR step has no other way to set the driver's environment;
* ``--kinesis-lake-args "ingest --derive"``: the command as one argument (Glue passes job
  parameters as ``--name value`` pairs and adds its own, which are ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kinesis_lake.cli import main as cli_main
from kinesis_lake.config import Settings

ENV_ARGUMENT = "--kinesis-lake-env"
COMMAND_ARGUMENT = "--kinesis-lake-args"
PIPES_CONTEXT_ARGUMENT = "--dagster-pipes-context"
PIPES_MESSAGES_ARGUMENT = "--dagster-pipes-messages"
PIPES_CONTEXT_VARIABLE = "DAGSTER_PIPES_CONTEXT"
PIPES_MESSAGES_VARIABLE = "DAGSTER_PIPES_MESSAGES"
DERIVE_COMMAND = "derive"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kinesis_lake_submit.py", allow_abbrev=False)
    parser.add_argument(ENV_ARGUMENT, dest="env", default=None)
    parser.add_argument(COMMAND_ARGUMENT, dest="command", default=None)
    parser.add_argument(PIPES_CONTEXT_ARGUMENT, dest="pipes_context", default=None)
    parser.add_argument(PIPES_MESSAGES_ARGUMENT, dest="pipes_messages", default=None)
    return parser


def parse_invocation(argv: Sequence[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(the kinesis-lake command, settings to set, Pipes parameters given as arguments)."""
    known, rest = _parser().parse_known_args(list(argv))
    # With --kinesis-lake-args the rest are the platform's own arguments (Glue's --JOB_ID...).
    command = shlex.split(known.command) if known.command is not None else rest
    env = json.loads(known.env) if known.env else {}
    if not isinstance(env, dict):
        raise SystemExit(f"{ENV_ARGUMENT} must be a JSON object of variables, got {known.env!r}")
    pipes = {}
    if known.pipes_context is not None:
        pipes[PIPES_CONTEXT_VARIABLE] = known.pipes_context
    if known.pipes_messages is not None:
        pipes[PIPES_MESSAGES_VARIABLE] = known.pipes_messages
    return command, {str(k): str(v) for k, v in env.items()}, pipes


def adopt_cluster() -> None:
    """Under ``spark-submit`` the cluster, not the settings, decides the master, and the
    driver listens where executors on other machines can reach it (``SPARK_LOCAL_IP``,
    when set, still wins: the tests keep everything on loopback)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        return
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # attach to spark-submit's JVM: its conf, not {}
    conf = SparkConf()
    os.environ["SPARK_MASTER"] = conf.get("spark.master", os.environ.get("SPARK_MASTER", ""))
    if "SPARK_LOCAL_IP" not in os.environ:
        host = conf.get("spark.driver.host", None) or socket.gethostname()
        os.environ["SPARK_LOCAL_IP"] = socket.gethostbyname(host)


def run_command(command: Sequence[str]) -> None:
    """``derive``, or any kinesis-lake command through the CLI."""
    if list(command[:1]) != [DERIVE_COMMAND]:
        cli_main(list(command))
        return
    from kinesis_lake.pipeline.derive import refresh_downstream
    from kinesis_lake.pipeline.preflight import check_event_schema
    from kinesis_lake.spark.runtime.session import build_spark_session

    settings = Settings.from_env()
    check_event_schema(settings)
    spark = build_spark_session(settings.spark_master, log_dir=settings.log_dir)
    try:
        result = refresh_downstream(spark, settings)
    finally:
        spark.stop()
    print(f"derived: {result.rows_written} rows routed")


def main(argv: Sequence[str] | None = None) -> None:
    command, env, pipes_arguments = parse_invocation(sys.argv[1:] if argv is None else argv)
    os.environ.update(env)
    adopt_cluster()
    params = pipes_arguments or {
        name: os.environ[name]
        for name in (PIPES_CONTEXT_VARIABLE, PIPES_MESSAGES_VARIABLE)
        if name in os.environ
    }
    if PIPES_CONTEXT_VARIABLE not in params:
        run_command(command)
        return
    with pipes_session(params) as pipes:
        reported = _Reporter(Settings.from_env(), pipes.asset_keys if pipes.is_asset_step else [])
        run_command(command)
        for key, metadata in reported.metadata().items():
            pipes.report_asset_materialization(asset_key=key, metadata=metadata)


@contextmanager
def pipes_session(params: Mapping[str, str]) -> Iterator[Any]:
    """The Pipes context, read and written where Dagster's side asked: an S3 object or
    the parameters themselves for the context, S3 or stdout for the messages."""
    from dagster_pipes import (
        PipesDefaultContextLoader,
        PipesDefaultMessageWriter,
        PipesMappingParamsLoader,
        PipesS3ContextLoader,
        PipesS3MessageWriter,
        open_dagster_pipes,
    )

    loader = PipesMappingParamsLoader(params)
    on_s3 = "bucket" in loader.load_context_params(), "bucket" in loader.load_messages_params()
    s3 = _s3_client() if any(on_s3) else None
    with open_dagster_pipes(
        params_loader=loader,
        context_loader=PipesS3ContextLoader(s3) if on_s3[0] else PipesDefaultContextLoader(),
        message_writer=PipesS3MessageWriter(s3, interval=1)
        if on_s3[1]
        else PipesDefaultMessageWriter(),
    ) as pipes:
        yield pipes


def _s3_client() -> Any:
    import boto3

    return boto3.client("s3")


class _Reporter:
    """Each asset's table (and, for a raw table, its stream) before the run, and the
    metadata of what the run changed after it: the in-process assets' keys. A downstream
    table the run did not commit to is left out, as the in-process derive step leaves it
    (its spec is skippable): a materialization says a commit landed."""

    def __init__(self, settings: Settings, asset_keys: Sequence[str]) -> None:
        from kinesis_lake.events.declaration_file import load_declaration
        from kinesis_lake.pipeline.lake import lake_streams
        from kinesis_lake.pipeline.run_report import table_state

        self._settings = settings
        streams = lake_streams(settings, load_declaration(settings.event_schema_path))
        self._streams = {stream.raw_table_name: stream for stream in streams}
        self._before = {
            key: table_state(settings, f"{settings.namespace}.{key}") for key in asset_keys
        }
        self._started = time.monotonic()

    def metadata(self) -> dict[str, dict[str, Any]]:
        from kinesis_lake.pipeline.run_report import stream_state, table_change

        seconds = round(time.monotonic() - self._started, 3)  # shown, and divided, as shown
        reported: dict[str, dict[str, Any]] = {}
        for key, before in self._before.items():
            change = table_change(self._settings, before)
            stream = self._streams.get(key)
            if stream is None and change.commits == 0:
                continue  # a downstream table with nothing new is skippable, as in process
            metadata: dict[str, Any] = {
                "dagster/table_name": before.identifier,
                "dagster/row_count": change.after.rows,
                "rows_added": change.rows_added,
                "data_files": change.after.data_files,
                "seconds": seconds,
            }
            if change.after.snapshot_id is not None:
                metadata["snapshot_id"] = change.after.snapshot_id
            if stream is None:
                metadata["committed"] = True
            else:
                state = stream_state(stream)
                metadata.update(
                    {
                        "batches": change.commits,
                        "rows_per_second": round(change.rows_added / max(seconds, 0.001), 1),
                        "skipped_ranges": state.skipped_ranges,
                        "shards_committed": len(state.positions),
                        **{f"position/{s}": at for s, at in sorted(state.positions.items())},
                    }
                )
            reported[key] = metadata
        return reported


if __name__ == "__main__":
    main()
