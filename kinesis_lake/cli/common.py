"""What the commands share: the settings, the streams a command works on, and how a
command is added to the parser."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError

Commands = argparse._SubParsersAction
"""The parser's commands, to which each command module adds its own."""


def current_settings() -> Settings:
    return Settings.from_env()


def chosen_streams(settings: Settings, chosen: str | None, *, one: bool = False) -> list[Settings]:
    """The settings of the streams a command works on: ``--stream``, else every stream the
    declaration names (exactly one, for commands that run one query)."""
    from kinesis_lake.events.declaration_file import load_declaration
    from kinesis_lake.pipeline.lake import lake_streams
    from kinesis_lake.pipeline.preflight import check_event_schema

    check_event_schema(settings)  # the declaration names the streams: a broken one says so
    streams = lake_streams(settings, load_declaration(settings.event_schema_path))
    names = [stream.stream_name for stream in streams]
    if chosen is not None:
        streams = [stream for stream in streams if stream.stream_name == chosen]
        if not streams:
            raise ConfigurationError(
                f"--stream {chosen}: not a stream of this lake; its streams: {', '.join(names)}"
            )
    if one and len(streams) > 1:
        raise ConfigurationError(
            f"the declaration names {len(streams)} streams: choose one with --stream "
            f"({', '.join(names)})"
        )
    return streams


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, except where there is none to show or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action) or text


def add_command(
    commands: Commands,
    name: str,
    summary: str,
    func: Callable[[argparse.Namespace], None],
    description: str | None = None,
) -> argparse.ArgumentParser:
    command = commands.add_parser(
        name, help=summary, description=description or summary, formatter_class=HelpFormatter
    )
    command.set_defaults(func=func)
    return command
