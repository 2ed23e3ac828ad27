"""``kinesis-lake settings``: every setting, its value and what it is for."""

from __future__ import annotations

import argparse

from kinesis_lake.cli.common import Commands, add_command, current_settings
from kinesis_lake.config import settings_markdown


def cmd_settings(args: argparse.Namespace) -> None:
    if args.markdown:
        print(settings_markdown(), end="")
        return
    for variable, value, description in current_settings().describe():
        print(f"{variable:36} {value or '(unset)':40} {description}")


def add_settings(commands: Commands) -> None:
    settings = add_command(commands, "settings", "print every setting and its value", cmd_settings)
    settings.add_argument(
        "--markdown", action="store_true", help="print the README's table of settings instead"
    )
