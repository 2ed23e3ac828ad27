"""``kinesis-lake check``: the definitions' asset checks, once, against the lake (for CI)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kinesis_lake.cli.common import Commands, add_command, current_settings


def cmd_check(args: argparse.Namespace) -> None:
    from kinesis_lake.check_runner import check_command

    junit = Path(args.junit_xml) if args.junit_xml else None
    sys.exit(
        check_command(
            current_settings(),
            args.select,
            junit,
            warnings_fail=args.warnings_fail,
            debug=args.debug,
        )
    )


def add_check(commands: Commands) -> None:
    check = add_command(
        commands,
        "check",
        "run the asset checks against the lake (for CI); exit 1 when one fails",
        cmd_check,
        "Run the definitions' asset checks once against the configured lake, without "
        "materializing anything. Prints one line per check; exits 1 when a check fails "
        "with ERROR severity (or with WARN severity too, with --warnings-fail).",
    )
    check.add_argument(
        "--select",
        nargs="+",
        default=[],
        metavar="ASSET|CHECK|ASSET:CHECK",
        help="only these checks, e.g. raw_events events_quarantine:quarantine_ratio; default: all",
    )
    check.add_argument(
        "--junit-xml", metavar="PATH", default=None, help="also write the outcomes as JUnit XML"
    )
    check.add_argument(
        "--warnings-fail",
        action="store_true",
        help="a check failing with WARN severity fails the command too",
    )
