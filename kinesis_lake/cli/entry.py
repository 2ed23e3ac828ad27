"""The front door of ``kinesis-lake``: the parser, with every command in the order its
help lists them, and ``main``, which loads ``--profile``, runs the command and turns an
error of ours into one line (``error_line``) instead of a trace."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from kinesis_lake.cli.checks import add_check
from kinesis_lake.cli.common import Commands, HelpFormatter
from kinesis_lake.cli.ingest import add_acknowledge_loss, add_ingest, add_stream
from kinesis_lake.cli.local import add_connect_server, add_demo, add_dev, add_endpoint
from kinesis_lake.cli.settings import add_settings
from kinesis_lake.cli.streams import add_create_streams, add_produce
from kinesis_lake.cli.tables import add_history, add_maintain, add_query, add_replay
from kinesis_lake.config import Settings, load_profile
from kinesis_lake.errors import ConfigurationError, KinesisLakeError

COMMANDS: tuple[Callable[[Commands], None], ...] = (
    add_settings,
    add_endpoint,
    add_connect_server,
    add_produce,
    add_create_streams,
    add_ingest,
    add_maintain,
    add_stream,
    add_query,
    add_history,
    add_replay,
    add_acknowledge_loss,
    add_check,
    add_demo,
    add_dev,
)
"""Every command, in the order ``kinesis-lake --help`` lists them; each module adds its
own commands' arguments next to the code that runs them."""

_DESCRIPTION = (
    "The command line over the same code the Dagster assets run. Every command reads its "
    "settings from the environment (kinesis-lake settings lists them); --profile FILE "
    "loads a profile such as profiles/local.env first, without overriding variables that "
    "are already set."
)


def _profile_path(name: str) -> Path:
    """``name`` in the working directory, else in the repository (profiles/local.env from
    anywhere); a missing file fails naming both places."""
    given = Path(name)
    in_repository = Path(__file__).resolve().parents[2] / given
    for candidate in (given, in_repository):
        if candidate.is_file():
            return candidate
    raise ConfigurationError(
        f"--profile {name}: no such file here or in the repository ({in_repository}); "
        "pass the path of an env file such as profiles/local.env"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinesis-lake", description=_DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full trace of an error instead of its one-line message",
    )
    parser.add_argument(
        "--profile",
        default=os.environ.get("KINESIS_LAKE_PROFILE"),
        help="env file to load first, e.g. profiles/local.env (relative to the working "
        "directory, else the repository); default: $KINESIS_LAKE_PROFILE",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.profile:
            load_profile(_profile_path(args.profile))
        args.func(args)
    except Exception as error:
        if args.debug or (message := error_line(error)) is None:
            raise
        log = _spark_log()
        raise SystemExit(
            f"kinesis-lake: {message}" + (f"\n(Spark's log: {log})" if log else "")
        ) from None


def error_line(error: BaseException) -> str | None:
    """The one line to print for ``error`` if it is one of ours, else None (a bug: show its
    trace). Spark hands back what a data source raised on the driver or an executor as a
    Py4J/streaming exception whose text holds the original ``SomeError: message`` line."""
    if isinstance(error, ConfigurationError):
        return f"configuration error: {error}"
    if isinstance(error, KinesisLakeError):
        return str(error)
    ours = {cls.__name__ for cls in _subclasses(KinesisLakeError)}
    for line in reversed(str(error).splitlines()):
        name, _, message = line.strip().partition(": ")
        if name.rsplit(".", 1)[-1] in ours and message:
            return message
    return None


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def _spark_log() -> Path | None:
    """The Spark log of this command, when it started Spark and wrote one."""
    if "pyspark" not in sys.modules:
        return None
    from kinesis_lake.spark.runtime.session import spark_log_file

    try:
        log = spark_log_file(Settings.from_env().log_dir)
    except KinesisLakeError:
        return None
    return log if log.exists() else None
