"""What the Avro and JSON Schema mappers (``avro_types.py``, ``json_schema_types.py``)
share: the error a schema that cannot declare a table raises, and how it names the path
inside the schema and the fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kinesis_lake.events.schema import EventSchemaError


class SchemaSourceError(EventSchemaError):
    """A schema a table names that cannot be read or mapped; the message says the fix."""


def refuse(origin: str, path: str, what: str, fix: str) -> SchemaSourceError:
    return SchemaSourceError(f"{origin}: field {path!r}: {what}; {fix}")


def one_type(
    origin: str, path: str, members: list[Any], what: str, optional: str
) -> tuple[Any, bool]:
    """The one type beside null in a union (Avro) or a list of types (JSON Schema), and
    whether null is among them; more than one type has no column type."""
    others = [member for member in members if member != "null"]
    if len(others) != 1:
        raise refuse(
            origin,
            path,
            f"{what} {json.dumps(members)} has no column type (a column holds one type)",
            f"use one type, or {optional} for an optional T",
        )
    return others[0], len(others) < len(members)


def recursive(origin: str, path: str, what: str) -> SchemaSourceError:
    return refuse(
        origin,
        path,
        f"{what} contains itself, and a table's columns cannot nest without end",
        "cut the recursion (e.g. keep a parent's id instead of the parent)",
    )


@contextmanager
def at_path(origin: str, path: str) -> Iterator[None]:
    """A field's own validation failure (a name that is no column name, two names that
    differ in case only) told against its path in the schema."""
    try:
        yield
    except SchemaSourceError:
        raise
    except EventSchemaError as exc:
        raise SchemaSourceError(f"{origin}: field {path or '(top)'!r}: {exc}") from None
