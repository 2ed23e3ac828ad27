"""``kinesis-lake``: the command line over the same code the Dagster assets run.

Every command reads its settings from the environment (see ``kinesis-lake settings``);
``--profile FILE`` first loads a profile such as ``profiles/local.env``, without
overriding variables that are already set.

The parser and ``main`` are in ``entry``; each command, with its arguments, in the module
of its group: ``settings``, ``local`` (endpoint, connect-server, demo, dev), ``streams``
(produce, create-streams), ``ingest`` (ingest, stream, acknowledge-loss), ``tables``
(query, history, maintain, replay) and ``checks`` (check); what they share in ``common``.
A new command is a ``cmd_`` and an ``add_`` function in its group's module, and one line
in ``entry.COMMANDS``.
"""

from kinesis_lake.cli.entry import build_parser, error_line, main

__all__ = ["build_parser", "error_line", "main"]
